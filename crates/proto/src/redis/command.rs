//! Command labels ("GET user:?", "CLIENT SETNAME", "MGET user:? (+2 keys)")
//! and the commands that change how later replies pair up.

use super::request::Kept;
use crate::digest::ParamDigest;
use crate::normalize;

/// How a command changes the reply stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    None,
    /// CLIENT REPLY ON / OFF / SKIP.
    ReplyOn,
    ReplyOff,
    ReplySkip,
    /// (P|S)(UN)SUBSCRIBE: one confirmation per channel (0: "all").
    Subscribe {
        channels: u64,
    },
    /// HELLO <protover>.
    Hello(Option<u8>),
    Monitor,
    Reset,
    /// PING: answered by an array in RESP2 subscribed mode, else "+PONG".
    Ping,
}

/// Commands whose arguments carry credentials: no digest, nothing kept.
const SECRET: [&[u8]; 5] = [b"AUTH", b"HELLO", b"ACL", b"CONFIG", b"MIGRATE"];

/// Commands named with their subcommand ("CLIENT SETNAME").
const WITH_SUBCOMMAND: [&[u8]; 17] = [
    b"ACL",
    b"CLIENT",
    b"CLUSTER",
    b"COMMAND",
    b"CONFIG",
    b"DEBUG",
    b"FUNCTION",
    b"LATENCY",
    b"MEMORY",
    b"MODULE",
    b"OBJECT",
    b"PUBSUB",
    b"SCRIPT",
    b"SLOWLOG",
    b"XGROUP",
    b"XINFO",
    b"SENTINEL",
];

/// Of those, the ones whose key follows the subcommand.
const SUBCOMMAND_THEN_KEY: [&[u8]; 4] = [b"MEMORY", b"OBJECT", b"XGROUP", b"XINFO"];

/// Every argument is a key: shown as the first key and a count.
const ALL_KEYS: [&[u8]; 10] = [
    b"DEL", b"EXISTS", b"MGET", b"PFCOUNT", b"SDIFF", b"SINTER", b"SUNION", b"TOUCH", b"UNLINK",
    b"WATCH",
];

/// Keys, then a timeout.
const KEYS_THEN_TIMEOUT: [&[u8]; 4] = [b"BLPOP", b"BRPOP", b"BZPOPMAX", b"BZPOPMIN"];

/// Key, value, key, value...
const KEY_VALUE_PAIRS: [&[u8]; 2] = [b"MSET", b"MSETNX"];

/// Channels (normalized like keys).
const CHANNELS: [&[u8]; 6] = [
    b"PSUBSCRIBE",
    b"PUNSUBSCRIBE",
    b"SSUBSCRIBE",
    b"SUBSCRIBE",
    b"SUNSUBSCRIBE",
    b"UNSUBSCRIBE",
];

/// Commands whose first argument is a key (or a channel). Others (PING,
/// SELECT, EVAL's script, unknown commands) are labelled by name only, so
/// an argument that is not a key never reaches the report.
const KEY_FIRST: &[&[u8]] = &[
    b"APPEND",
    b"BITCOUNT",
    b"BITFIELD",
    b"BITFIELD_RO",
    b"BITPOS",
    b"BLMOVE",
    b"BRPOPLPUSH",
    b"COPY",
    b"DECR",
    b"DECRBY",
    b"DUMP",
    b"EXPIRE",
    b"EXPIREAT",
    b"EXPIRETIME",
    b"GEOADD",
    b"GEODIST",
    b"GEOHASH",
    b"GEOPOS",
    b"GEORADIUS",
    b"GEORADIUSBYMEMBER",
    b"GEORADIUSBYMEMBER_RO",
    b"GEORADIUS_RO",
    b"GEOSEARCH",
    b"GEOSEARCHSTORE",
    b"GET",
    b"GETBIT",
    b"GETDEL",
    b"GETEX",
    b"GETRANGE",
    b"GETSET",
    b"HDEL",
    b"HEXISTS",
    b"HEXPIRE",
    b"HEXPIREAT",
    b"HGET",
    b"HGETALL",
    b"HGETDEL",
    b"HGETEX",
    b"HINCRBY",
    b"HINCRBYFLOAT",
    b"HKEYS",
    b"HLEN",
    b"HMGET",
    b"HMSET",
    b"HPERSIST",
    b"HPEXPIRE",
    b"HPTTL",
    b"HRANDFIELD",
    b"HSCAN",
    b"HSET",
    b"HSETEX",
    b"HSETNX",
    b"HSTRLEN",
    b"HTTL",
    b"HVALS",
    b"INCR",
    b"INCRBY",
    b"INCRBYFLOAT",
    b"LCS",
    b"LINDEX",
    b"LINSERT",
    b"LLEN",
    b"LMOVE",
    b"LPOP",
    b"LPOS",
    b"LPUSH",
    b"LPUSHX",
    b"LRANGE",
    b"LREM",
    b"LSET",
    b"LTRIM",
    b"MOVE",
    b"PERSIST",
    b"PEXPIRE",
    b"PEXPIREAT",
    b"PEXPIRETIME",
    b"PFADD",
    b"PFMERGE",
    b"PSETEX",
    b"PTTL",
    b"PUBLISH",
    b"RENAME",
    b"RENAMENX",
    b"RESTORE",
    b"RPOP",
    b"RPOPLPUSH",
    b"RPUSH",
    b"RPUSHX",
    b"SADD",
    b"SCARD",
    b"SDIFFSTORE",
    b"SET",
    b"SETBIT",
    b"SETEX",
    b"SETNX",
    b"SETRANGE",
    b"SINTERSTORE",
    b"SISMEMBER",
    b"SMEMBERS",
    b"SMISMEMBER",
    b"SMOVE",
    b"SORT",
    b"SORT_RO",
    b"SPOP",
    b"SPUBLISH",
    b"SRANDMEMBER",
    b"SREM",
    b"SSCAN",
    b"STRLEN",
    b"SUBSTR",
    b"SUNIONSTORE",
    b"TTL",
    b"TYPE",
    b"XACK",
    b"XADD",
    b"XAUTOCLAIM",
    b"XCLAIM",
    b"XDEL",
    b"XLEN",
    b"XPENDING",
    b"XRANGE",
    b"XREVRANGE",
    b"XSETID",
    b"XTRIM",
    b"ZADD",
    b"ZCARD",
    b"ZCOUNT",
    b"ZDIFFSTORE",
    b"ZINCRBY",
    b"ZINTERSTORE",
    b"ZLEXCOUNT",
    b"ZMSCORE",
    b"ZPOPMAX",
    b"ZPOPMIN",
    b"ZRANDMEMBER",
    b"ZRANGE",
    b"ZRANGEBYLEX",
    b"ZRANGEBYSCORE",
    b"ZRANGESTORE",
    b"ZRANK",
    b"ZREM",
    b"ZREMRANGEBYLEX",
    b"ZREMRANGEBYRANK",
    b"ZREMRANGEBYSCORE",
    b"ZREVRANGE",
    b"ZREVRANGEBYLEX",
    b"ZREVRANGEBYSCORE",
    b"ZREVRANK",
    b"ZSCAN",
    b"ZSCORE",
    b"ZUNIONSTORE",
];

/// Module command families whose first argument is a key (RedisJSON,
/// RedisBloom, RediSearch's index name).
const KEY_FIRST_MODULES: [&[u8]; 7] = [
    b"JSON.",
    b"BF.",
    b"CF.",
    b"CMS.",
    b"TOPK.",
    b"TDIGEST.",
    b"FT.",
];

/// Longest command or subcommand name shown.
const MAX_NAME: usize = 40;

fn is(list: &[&[u8]], name: &[u8]) -> bool {
    list.iter().any(|w| w.eq_ignore_ascii_case(name))
}

/// Whether the arguments of the command `name` may carry credentials.
pub fn is_secret(name: &[u8]) -> bool {
    is(&SECRET, name)
}

/// A command word as shown: upper-cased, or None when it does not look like one.
fn word(raw: &[u8]) -> Option<String> {
    let ok = !raw.is_empty()
        && raw.len() <= MAX_NAME
        && raw
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    ok.then(|| String::from_utf8_lossy(raw).to_ascii_uppercase())
}

/// The label and reply effect of a complete command.
pub fn describe(cmd: &Kept) -> (String, Effect) {
    let raw = cmd.arg(0).unwrap_or_default();
    let Some(name) = word(raw) else {
        return ("<not a command>".into(), Effect::None);
    };
    let n = name.as_bytes();
    let effect = effect(n, cmd);
    if is(&WITH_SUBCOMMAND, n) {
        let Some(sub) = cmd.arg(1).and_then(word) else {
            return (name, effect);
        };
        let label = format!("{name} {sub}");
        if is(&SUBCOMMAND_THEN_KEY, n) && cmd.argc > 2 && sub != "HELP" {
            return (keyed(label, cmd, 2, 0, "keys"), effect);
        }
        return (label, effect);
    }
    let args = cmd.argc.saturating_sub(1);
    let label = if is(&ALL_KEYS, n) {
        keyed(name, cmd, 1, args.saturating_sub(1), "keys")
    } else if is(&CHANNELS, n) {
        keyed(name, cmd, 1, args.saturating_sub(1), "channels")
    } else if is(&KEYS_THEN_TIMEOUT, n) {
        keyed(name, cmd, 1, args.saturating_sub(2), "keys")
    } else if is(&KEY_VALUE_PAIRS, n) {
        keyed(name, cmd, 1, (args / 2).saturating_sub(1), "keys")
    } else if is(KEY_FIRST, n) || KEY_FIRST_MODULES.iter().any(|p| n.starts_with(p)) {
        keyed(name, cmd, 1, 0, "keys")
    } else {
        name
    };
    (label, effect)
}

/// `label` followed by the normalized key at argument `at` (when there is
/// one) and "(+n keys)" when more follow. The key's parts are already in
/// the command's digest (all arguments are), so normalizing uses a scratch one.
fn keyed(label: String, cmd: &Kept, at: usize, more: u64, what: &str) -> String {
    let Some(key) = cmd.arg(at).filter(|_| cmd.argc > at as u64) else {
        return label;
    };
    let mut scratch = ParamDigest::new();
    let mut text = format!("{label} {}", normalize::key(key, &mut scratch));
    if key.len() >= super::request::MAX_ARG_BYTES {
        text.push('…');
    }
    if more > 0 {
        text.push_str(&format!(" (+{more} {what})"));
    }
    text
}

fn effect(name: &[u8], cmd: &Kept) -> Effect {
    let arg = |i: usize| cmd.arg(i).unwrap_or_default();
    if name == b"CLIENT" && arg(1).eq_ignore_ascii_case(b"REPLY") {
        let mode = arg(2);
        if mode.eq_ignore_ascii_case(b"ON") {
            return Effect::ReplyOn;
        } else if mode.eq_ignore_ascii_case(b"OFF") {
            return Effect::ReplyOff;
        } else if mode.eq_ignore_ascii_case(b"SKIP") {
            return Effect::ReplySkip;
        }
    }
    match name {
        _ if is(&CHANNELS, name) => Effect::Subscribe {
            channels: cmd.argc.saturating_sub(1),
        },
        b"HELLO" => Effect::Hello(match arg(1) {
            b"2" => Some(2),
            b"3" => Some(3),
            _ => None,
        }),
        b"MONITOR" => Effect::Monitor,
        b"RESET" => Effect::Reset,
        b"PING" => Effect::Ping,
        _ => Effect::None,
    }
}
