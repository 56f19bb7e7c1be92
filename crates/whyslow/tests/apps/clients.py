"""Real client libraries against real servers, for the wire tests:
redis-py (a pipeline and single commands) and pymemcache (text protocol).
Usage: clients.py REDIS_PORT MEMCACHED_PORT. Prints what it sent as JSON."""
import json
import sys

import redis
from pymemcache.client.base import Client

redis_port, mc_port = int(sys.argv[1]), int(sys.argv[2])
sent = {"redis": 0, "memcached": 0}

r = redis.Redis(host="127.0.0.1", port=redis_port)
r.set("user:u48151623x:token", "s3cr3t-redis-value")
r.get("user:u48151623x:token")
sent["redis"] += 2
pipe = r.pipeline(transaction=False)
for i in range(50):
    pipe.set(f"item:i{i}x:price", f"v-secret-{i}")
pipe.execute()
sent["redis"] += 50
r.mget([f"item:i{i}x:price" for i in range(3)])
r.incr("counter:c9931x")
sent["redis"] += 2

mc = Client(("127.0.0.1", mc_port))
mc.set("sess:s9f86d081x:cart", "mc-secret-value", noreply=False)
mc.set("sess:s1234567x:cart", "mc-secret-other", noreply=True)
mc.get("sess:s9f86d081x:cart")
mc.get_many(["sess:s9f86d081x:cart", "sess:s1234567x:cart", "sess:missing9x:cart"])
mc.delete("sess:s1234567x:cart", noreply=False)
sent["memcached"] += 5
print(json.dumps(sent))
