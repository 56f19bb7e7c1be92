#!/usr/bin/env python3
"""Writes the tiny seed inputs of the fuzz targets (fuzz/seeds/TARGET/*).

Each is a valid input of its target: one HTTP/1.1 exchange on a TCP
connection, as a pcap file, a pcapng file, flow_table records and http1
chunks. Run again after changing an input format; scripts/fuzz-smoke.sh uses
the files as they are committed.
"""
import os
import ssl
import struct
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REQ = b"GET /a?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"
RESP = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4_tcp(src, dst, sport, dport, seq, ack, flags, payload=b"", wscale=None):
    opts = b""
    if wscale is not None:
        opts = b"\x01\x03\x03" + bytes([wscale])  # NOP + window scale
    off = (20 + len(opts)) // 4
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, off << 4, flags, 65535, 0, 0)
    tcp += opts + payload
    pseudo = struct.pack("!4s4sBBH", bytes(src), bytes(dst), 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0, bytes(src), bytes(dst))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return ip + tcp


SYN, FIN, PSH, ACK = 0x02, 0x01, 0x08, 0x10


def exchange_frames():
    """One connection: handshake, GET, 200, ACK, FINs. Ethernet frames."""
    c, s = [10, 0, 0, 1], [10, 0, 0, 2]
    cp, sp = 40000, 80
    cs, ss = 1000, 5000
    pk = [
        (c, s, cp, sp, cs, 0, SYN, b"", 7),
        (s, c, sp, cp, ss, cs + 1, SYN | ACK, b"", 7),
        (c, s, cp, sp, cs + 1, ss + 1, ACK, b"", None),
        (c, s, cp, sp, cs + 1, ss + 1, PSH | ACK, REQ, None),
        (s, c, sp, cp, ss + 1, cs + 1 + len(REQ), PSH | ACK, RESP, None),
        (c, s, cp, sp, cs + 1 + len(REQ), ss + 1 + len(RESP), FIN | ACK, b"", None),
        (s, c, sp, cp, ss + 1 + len(RESP), cs + 2 + len(REQ), FIN | ACK, b"", None),
    ]
    eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    return [eth + ipv4_tcp(*p[:7], payload=p[7], wscale=p[8]) for p in pk]


def pcap(frames):
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for i, f in enumerate(frames):
        out += struct.pack("<IIII", 1700000000, 1000 * i, len(f), len(f)) + f
    return out


def block(kind, body):
    pad = (-len(body)) % 4
    n = 12 + len(body) + pad
    return struct.pack("<II", kind, n) + body + b"\0" * pad + struct.pack("<I", n)


def pcapng(frames):
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", 1, 0, 65535))  # Ethernet, µs resolution
    for i, f in enumerate(frames):
        ts = 1700000000 * 1_000_000 + 1000 * i
        out += block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(f), len(f)) + f)
    return out


def two_hosts(frames):
    """One connection captured on its client's host and, 300 µs later, on
    its server's: the first's length (u16, little-endian), then both."""
    a = pcap(frames)
    later = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for i, f in enumerate(frames):
        later += struct.pack("<IIII", 1700000000, 1000 * i + 300, len(f), len(f)) + f
    return struct.pack("<H", len(a)) + a + later


def flow_records():
    """fuzz::flow_table records: [ctl, flags, dseq, dack, win, payload]."""
    def seg(to_client, flags, dseq, dack, payload=b""):
        body = bytes([flags, dseq & 0xFF, dack & 0xFF, 0xFF]) + payload
        assert len(body) < 64
        return bytes([(0x40 if to_client else 0) | len(body)]) + body

    syn, ack, fin = 1, 2, 4
    out = seg(False, syn, 0, 0) + seg(True, syn | ack, 0, 1)
    out += seg(False, ack, 1, 1) + seg(False, ack, 0, 0, REQ)
    out += seg(True, ack, 1, 0, RESP) + seg(False, ack | fin, 0, 0) + seg(True, ack | fin, 0, 1)
    raw = ipv4_tcp([10, 0, 0, 1], [10, 0, 0, 2], 40001, 80, 7, 0, SYN)
    return out + bytes([0x80 | len(raw)]) + raw


def http1_chunks():
    """fuzz::http1 chunks: [ctl (bit 7 = to client), bytes]."""
    def chunk(to_client, b):
        assert len(b) < 64
        return bytes([(0x80 if to_client else 0) | len(b)]) + b

    keep_alive = chunk(False, REQ) + chunk(True, RESP) + chunk(False, REQ) + chunk(True, RESP)
    post = b"POST /s HTTP/1.1\r\nContent-Length: 4\r\n\r\n"
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    split = chunk(False, post) + chunk(False, b"body") + chunk(True, chunked) + chunk(True, b"2\r\nhi\r\n0\r\n\r\n")
    return {"keep_alive": keep_alive, "post_chunked": split}


def chunks(to_client, b):
    """b as fuzz chunks of at most 63 bytes."""
    out = b""
    for i in range(0, len(b), 63):
        part = b[i:i + 63]
        out += bytes([(0x80 if to_client else 0) | len(part)]) + part
    return out


def pg_msg(t, body):
    return t + struct.pack("!I", 4 + len(body)) + body


def my_pkt(seq, body):
    return struct.pack("<I", len(body))[:3] + bytes([seq]) + body


def mysql_turns():
    """A MySQL session: greeting (the server speaks first), login, OK, a
    query and its one-row result set, a prepare and an execution."""
    greeting = (b"\x0a10.11-MariaDB\0" + struct.pack("<I", 7) + b"abcdefgh\0"
                + struct.pack("<HBHH", 0xf7ff, 45, 2, 0x81bf) + bytes([21]) + bytes(10)
                + b"ijklmnopqrst\0mysql_native_password\0")
    login = struct.pack("<IIB", 0x000fa68d, 1 << 24, 45) + bytes(23) + b"app\0\0"
    ok = lambda seq: my_pkt(seq, b"\0\0\0\x02\0\0\0")
    eof = lambda seq: my_pkt(seq, b"\xfe\0\0\x02\0")
    col = lambda seq: my_pkt(seq, b"\x03def\x04shop\x01t\x01t\x01a\x01a\x0c" + bytes(12))
    result = my_pkt(1, b"\x01") + col(2) + eof(3) + my_pkt(4, b"\x01x") + eof(5)
    prepare = my_pkt(0, b"\x16SELECT a FROM t WHERE id = ?")
    prepared = my_pkt(1, b"\0" + struct.pack("<IHHBH", 1, 1, 1, 0, 0)) + col(2) + eof(3) + col(4) + eof(5)
    execute = my_pkt(0, b"\x17" + struct.pack("<IBI", 1, 0, 1) + b"\0\x01\x08\0" + struct.pack("<q", 5))
    return [(b"", my_pkt(0, greeting)), (my_pkt(1, login), ok(2)),
            (my_pkt(0, b"\x03SELECT a FROM t WHERE id = 'x'"), result),
            (prepare, prepared), (execute, result.replace(b"\x01x", b"\0\0\x01x"))]


def dns_name(n):
    return b"".join(bytes([len(l)]) + l.encode() for l in n.split(".")) + b"\0"


def dns_query(qid, n, qtype=1):
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + dns_name(n) + struct.pack("!HH", qtype, 1)


def dns_response(qid, n, rcode=0, addr=None):
    an = 0 if addr is None else 1
    out = struct.pack("!HHHHHH", qid, 0x8180 | rcode, 1, an, 0, 0) + dns_name(n) + struct.pack("!HH", 1, 1)
    if addr is not None:
        out += b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + bytes(addr)
    return out


def dns_turns():
    """A search-list lookup over TCP framing: NXDOMAIN, then the answer."""
    framed = lambda m: struct.pack("!H", len(m)) + m
    return [(framed(dns_query(1, "api.internal.svc.cluster.local")), framed(dns_response(1, "api.internal.svc.cluster.local", 3))),
            (framed(dns_query(2, "api.internal")), framed(dns_response(2, "api.internal", 0, [127, 0, 0, 1])))]


def ipv4_udp(src, dst, sport, dport, payload):
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0x4000, 64, 17, 0, bytes(src), bytes(dst))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return ip + udp


def ipv4(src, dst, proto, payload):
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0x4000, 64, proto, 0, bytes(src), bytes(dst))
    return ip[:10] + struct.pack("!H", csum(ip)) + ip[12:] + payload


def tunnel_frames():
    """The HTTP exchange's frames inside VXLAN (an Ethernet frame after an
    8-byte header, UDP 4789) and inside GRE with a key (the IP packet)."""
    a, b = [192, 168, 0, 1], [192, 168, 0, 2]
    eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    vxlan = [eth + ipv4_udp(a, b, 50000, 4789, b"\x08\0\0\0\0\0\x2a\0" + f) for f in exchange_frames()]
    gre = [eth + ipv4(a, b, 47, b"\x20\0\x08\x00" + b"\0\0\0\x07" + f[14:]) for f in exchange_frames()]
    return vxlan, gre


def dns_frames():
    """A query and its answer over UDP, and one datagram that is not DNS."""
    c, s = [10, 0, 0, 1], [10, 0, 0, 53]
    return [ipv4_udp(c, s, 40000, 53, dns_query(7, "db.internal")),
            ipv4_udp(s, c, 53, 40000, dns_response(7, "db.internal", 0, [10, 0, 0, 9])),
            ipv4_udp(c, s, 40001, 123, b"\x23" + bytes(47))]


def lab_mysql_commands():
    """mymini::fuzz input: command packets after the login (a prepare, an
    execution with its types, a ping, a close)."""
    prepare = my_pkt(0, b"\x16SELECT id, name, price FROM products WHERE id = ?")
    execute = my_pkt(0, b"\x17" + struct.pack("<IBI", 1, 0, 1) + b"\0\x01\x08\0" + struct.pack("<q", 3))
    return prepare + execute + my_pkt(0, b"\x0e") + my_pkt(0, b"\x19" + struct.pack("<I", 1))


def backing_conversations():
    """One short conversation per backing protocol, as (client, server) byte pairs."""
    startup = struct.pack("!II", 8, 80877103)
    params = b"user\0postgres\0database\0postgres\0\0"
    startup += struct.pack("!II", 8 + len(params), 196608) + params
    pg_server = b"N" + pg_msg(b"R", struct.pack("!I", 0)) + pg_msg(b"Z", b"I")
    pg_client = pg_msg(b"Q", b"SELECT 'x' AS a\0")
    pg_reply = (pg_msg(b"T", struct.pack("!H", 1) + b"a\0" + bytes(18)) + pg_msg(b"D", struct.pack("!HI", 1, 1) + b"x")
                + pg_msg(b"C", b"SELECT 1\0") + pg_msg(b"Z", b"I"))
    frame = lambda t, f, sid, payload: struct.pack("!I", len(payload))[1:] + bytes([t, f]) + struct.pack("!I", sid) + payload
    h2_client = (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"")
                 + frame(1, 0x5, 1, b"\x82\x86\x84\x41\x01a"))
    h2_server = frame(4, 0, 0, b"") + frame(1, 0x4, 1, b"\x88") + frame(0, 0x1, 1, b"hi")
    return {
        "redis": [(b"*3\r\n$3\r\nSET\r\n$5\r\nuser:\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$5\r\nuser:\r\n", b"+OK\r\n$1\r\nv\r\n")],
        "memcached": [(b"set k:1 0 0 2\r\nhi\r\nget k:1 k:2\r\n", b"STORED\r\nVALUE k:1 0 2\r\nhi\r\nEND\r\n")],
        "postgres": [(startup, pg_server), (pg_client, pg_reply)],
        "http2": [(h2_client, h2_server)],
        "mysql": mysql_turns(),
        "dns": dns_turns(),
    }


def lab_postgres_messages():
    """Frontend messages after startup: Parse, Describe, Bind, Execute, Sync."""
    def msg(kind, body):
        return kind + struct.pack("!I", len(body) + 4) + body
    sql = b"SELECT id, name, price FROM products WHERE id = $1"
    return (msg(b"P", b"s0\0" + sql + b"\0\0\0") + msg(b"D", b"Ss0\0") + msg(b"S", b"")
            + msg(b"B", b"\0s0\0\0\x01\0\x01\0\x01\0\0\0\x08" + struct.pack("!q", 7) + b"\0\x01\0\x01")
            + msg(b"E", b"\0\0\0\0\0") + msg(b"S", b"") + msg(b"X", b""))


def lab_cache_commands():
    """What the cache-hol page sends: a SET of a value, a GET, a PING."""
    return (b"*3\r\n$3\r\nSET\r\n$16\r\nstash:product:42\r\n$8\r\nxxxxxxxx\r\n"
            b"*2\r\n$3\r\nGET\r\n$10\r\nhot:config\r\n*1\r\n$4\r\nPING\r\n")


def lab_cache_replies():
    """First byte picks protocol and kind (see whyslow_lab::cache::fuzz)."""
    return {
        "resp_value": b"\0$3\r\nabc\r\n$-1\r\n",
        "resp_stored": b"\2+OK\r\n+OK\r\n",
        "memcached_value": b"\1VALUE hot:config 0 2\r\nok\r\nEND\r\nEND\r\n",
        "memcached_stored": b"\3STORED\r\nSTORED\r\n",
    }


HTTP_TALK = [(b"GET /seed HTTP/1.1\r\nHost: seed.test\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")]


def tls_session(version, ciphers=None, talk=HTTP_TALK, alpn=("http/1.1",), server_curve=None):
    """A real TLS session between Python's client and server over memory
    BIOs, carrying `talk` (client bytes, server bytes) after the handshake:
    (key log text, [(to_client, bytes)])."""
    d = tempfile.mkdtemp()
    cert, key, log = (os.path.join(d, n) for n in ("c.pem", "k.pem", "keys"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=seed"],
                   check=True, capture_output=True)
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); sctx.load_cert_chain(cert, key)
    cctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT); cctx.check_hostname = False; cctx.verify_mode = ssl.CERT_NONE
    cctx.keylog_filename = log
    for c in (sctx, cctx):
        c.minimum_version = c.maximum_version = version
        if ciphers: c.set_ciphers(ciphers)
    if alpn: cctx.set_alpn_protocols(list(alpn)); sctx.set_alpn_protocols(list(alpn))
    # One group only, as PostgreSQL sets: a client offering X25519 first gets a HelloRetryRequest.
    if server_curve: sctx.set_ecdh_curve(server_curve)
    bios = [ssl.MemoryBIO() for _ in range(4)]
    client = cctx.wrap_bio(bios[0], bios[1], server_hostname="seed.test")
    server = sctx.wrap_bio(bios[2], bios[3], server_side=True)
    wire = []
    def pump():
        moved = False
        out = bios[1].read()
        if out: wire.append((False, out)); bios[2].write(out); moved = True
        out = bios[3].read()
        if out: wire.append((True, out)); bios[0].write(out); moved = True
        return moved
    done = [False, False]
    while not all(done):
        for i, s in enumerate((client, server)):
            if not done[i]:
                try: s.do_handshake(); done[i] = True
                except ssl.SSLWantReadError: pass
        if not pump() and not all(done): break
    for c, r in talk:
        client.write(c); pump()
        server.read(); server.write(r); pump()
        client.read(); pump()
    return open(log).read(), wire


def tls_seed(version, ciphers=None, server_curve=None):
    """fuzz::tls input: the key log's length and text, then the session as chunks."""
    log, wire = tls_session(version, ciphers, server_curve=server_curve)
    text = log.encode()
    return struct.pack("!H", len(text)) + text + b"".join(chunks(c, b) for c, b in wire)


def pg_tls_seed():
    """As tls_seed, for PostgreSQL: SSLRequest answered S, then the startup
    and one simple query inside TLS 1.3."""
    pg = backing_conversations()["postgres"]
    ssl_request, startup = pg[0][0][:8], pg[0][0][8:]
    server_hello = pg[0][1][1:]
    talk = [(startup, server_hello), pg[1]]
    log, wire = tls_session(ssl.TLSVersion.TLSv1_3, talk=talk, alpn=())
    text = log.encode()
    return (struct.pack("!H", len(text)) + text + chunks(False, ssl_request) + chunks(True, b"S")
            + b"".join(chunks(c, b) for c, b in wire))


# /proc/PID/cgroup of a pod's container (both drivers), and a socket table.
CONTAINER_TEXT = {
    "proc_cgroup": b'12:pids:/kubepods/burstable/pod0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f/3f2a9c0d1e4b5a6978877665544332211000ffeeddccbbaa9988776655443322\n0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0c1d2e3f_4a5b_6c7d_8e9f_0a1b2c3d4e5f.slice/cri-containerd-3f2a9c0d1e4b5a6978877665544332211000ffeeddccbbaa9988776655443322.scope\n',
    "net_tcp": b'  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n',
}


def write(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# /proc text as Linux writes it, one file per parser of crates/host.
PROC_TEXT = {
    "stat": b"cpu  905686 3309 244007 4840771 13721 0 18913 318 0 0\nprocs_running 2\n",
    "pressure": b"some avg10=5.06 avg60=4.25 avg300=2.97 total=843711059\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    "snmp": b"Tcp: RtoAlgorithm RtoMin OutSegs RetransSegs\nTcp: 1 200 1000 7\n",
    "netstat": b"TcpExt: ListenOverflows ListenDrops\nTcpExt: 2 3\n",
    "softnet": b"01612e48 00000000 0000000a 00000000\n",
    "diskstats": b"   8       0 sda 1 2 3 4 5 6 7 8 9 900 1800 0 0 0 0\n",
    "sockstat": b"TCP: inuse 15 orphan 0 tw 15 alloc 15 mem 82\n",
    "net_dev": b"Inter-|   Receive\n face |bytes\n    lo: 1 2 3 4 0 0 0 0 5 6 7 8 0 0 0 0\n",
}

# A probe report, the smallest result `compare` reads.
REPORT = (b'{"schema_version":1,"command":"probe","target":null,"sections":[{"label":"as given",'
          b'"requests":[{"index":0,"connection":0,"reused":false,"dns_us":1,"connect_us":2,'
          b'"tls_us":0,"send_us":3,"wait_us":400,"receive_us":5,"total_us":411,"status":200,'
          b'"http_version":"1.1","remote":null,"local":null,"request_bytes":1,'
          b'"response_header_bytes":1,"response_body_bytes":1,"content_encoding":null,"tls":null}]}],'
          b'"timeline":null,"findings":[],"skipped":[],"errors":[]}')


def ebpf_record(kind, tid, payload):
    """One socket call as sockio.bpf.c records it (crates/ebpf/src/event.rs)."""
    b = bytearray(100)
    struct.pack_into("<QQIIqIIiHH", b, 0, 1000, 6000, 40, tid, len(payload), 1000,
                     len(payload), 5, 2, kind)
    b[48:52] = bytes([127, 0, 0, 1])
    b[64:68] = bytes([127, 0, 0, 1])
    struct.pack_into("<HH", b, 80, 40000, 5432)
    b[84:91] = b"python3"
    return bytes(b) + payload


def ebpf_events_file():
    """An events file (crates/ebpf/src/file.rs): two calls and a lost count."""
    def frame(t, data):
        return bytes([t]) + struct.pack("<I", len(data)) + data
    return (b"whyslow-events\0\x01" + struct.pack("<q", 1000)
            + frame(1, ebpf_record(1, 41, b"Q\0\0\0\x0dSELECT 1;\0"))
            + frame(1, ebpf_record(2, 41, b"T\0\0\0\x04"))
            + frame(2, struct.pack("<QQ", 7, 0)))


if __name__ == "__main__":
    write("ebpf_events", "two_calls", ebpf_events_file())
    write("ebpf_events", "record", ebpf_record(1, 41, b"GET / HTTP/1.1\r\n\r\n"))
    for name, data in PROC_TEXT.items():
        write("host_counters", name, data)
    write("compare_result", "probe.json", REPORT)
    write("tls", "tls13", tls_seed(ssl.TLSVersion.TLSv1_3))
    write("tls", "tls12_gcm", tls_seed(ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-GCM-SHA256"))
    write("tls", "tls12_chacha", tls_seed(ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-CHACHA20-POLY1305"))
    write("tls", "tls13_hrr", tls_seed(ssl.TLSVersion.TLSv1_3, server_curve="prime256v1"))
    write("tls", "postgres_ssl", pg_tls_seed())
    frames = exchange_frames()
    write("read_capture", "http.pcap", pcap(frames))
    write("read_capture", "http.pcapng", pcapng(frames))
    write("flow_table", "http", flow_records())
    vxlan, gre = tunnel_frames()
    write("read_capture", "vxlan.pcap", pcap(vxlan))
    write("read_capture", "gre.pcap", pcap(gre))
    write("hosts_join", "two_hosts", two_hosts(frames))
    for name, data in http1_chunks().items():
        write("http1", name, data)
    write("lab_postgres_server", "checkout", lab_postgres_messages())
    write("lab_mysql_server", "checkout", lab_mysql_commands())
    write("lab_resp_server", "page", lab_cache_commands())
    for name, data in lab_cache_replies().items():
        write("lab_cache_client", name, data)
    eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    write("read_capture", "dns.pcap", pcap([eth + f for f in dns_frames()]))
    write("flow_table", "dns", b"".join(bytes([0x80 | len(f)]) + f for f in dns_frames() if len(f) < 64))
    ports = {"redis": 6379, "memcached": 11211, "postgres": 5432, "http2": 8080, "mysql": 3306, "dns": 53}
    for proto, turns in backing_conversations().items():
        data = b"".join(chunks(False, c) + chunks(True, s) for c, s in turns)
        write(proto, "conversation", data)
        write("sniff", proto, struct.pack("!H", ports[proto]) + b"\0" + data)
    for name, data in CONTAINER_TEXT.items():
        write("container_paths", name, data)
