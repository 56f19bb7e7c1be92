// Resolves names through Node.js, one after another: with dns.lookup
// (getaddrinfo on libuv's thread pool, as http.request does) or with
// dns.promises.resolve4 (c-ares, Node's own stub resolver), as
// /etc/resolv.conf says.
//
// usage: node dns_lookups.js lookup|resolve NAME[,NAME...] LOOKUPS
// Prints {"lookups": N, "failed": F} as JSON.
const dns = require("node:dns");

const [how, namesArg, lookupsArg] = process.argv.slice(2);
const names = namesArg.split(",");
const lookups = Number(lookupsArg);

async function one(name) {
  if (how === "lookup") {
    await dns.promises.lookup(name, { all: true });
  } else {
    await dns.promises.resolve4(name);
  }
}

(async () => {
  let failed = 0;
  for (let i = 0; i < lookups; i++) {
    try {
      await one(names[i % names.length]);
    } catch (e) {
      failed += 1;
    }
  }
  console.log(JSON.stringify({ lookups, failed }));
})();
