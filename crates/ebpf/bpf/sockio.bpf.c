// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// Socket reads and writes of the traced processes, with the thread that made
// them: the events `whyslow --ebpf` joins to the packets it captured (TCP,
// and the DNS queries of connected UDP sockets, as stub resolvers send
// them: glibc, c-ares); and
// the plaintext of OpenSSL's SSL_read/SSL_write (uprobes, attached by the
// loader to every libssl the traced processes map), placed on its socket;
// and in Go processes, the plaintext of crypto/tls and the goroutines
// (uprobes on the binary): a Go call is told by its goroutine, not its
// thread, since the runtime moves goroutines between threads.
//
// Built by crates/ebpf/bpf/build.sh (Debian's clang, CO-RE against the
// checked-in vmlinux.h) into sockio.bpf.o, which is checked in and loaded by
// crates/ebpf/src/load.rs. The event layout is `struct sock_event` below and
// `crates/ebpf/src/event.rs`; the two must change together.
//
// Filtering happens here, in the kernel: a syscall of a process that is not
// traced costs one map lookup and nothing reaches user space.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

// x86_64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl).
#define NR_READ 0
#define NR_WRITE 1
#define NR_READV 19
#define NR_WRITEV 20
#define NR_SENDTO 44
#define NR_RECVFROM 45
#define NR_SENDMSG 46
#define NR_RECVMSG 47
#define NR_SENDMMSG 307

#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define SOCK_DGRAM 2
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define DNS_PORT 53
#define S_IFMT 00170000
#define S_IFSOCK 0140000

// Payload kept per call: enough for a request line and its headers, a SQL
// statement, a Redis command; the byte count is always whole.
#define MAX_PAYLOAD 4096

#define KIND_SEND 1
#define KIND_RECV 2
#define KIND_THREAD 3
#define KIND_TLS_SEND 4
#define KIND_TLS_RECV 5
#define KIND_UNIX_NAME 6
#define KIND_THREAD_END 7

// Set by the loader before load: 1 traces every process, 0 only `pids`
// and, when `cgroup_id` is not 0, the processes of that cgroup (v2) and of
// the cgroups below it (a container), `cgroup_level` levels below the root.
const volatile __u8 trace_all = 0;
const volatile __u64 cgroup_id = 0;
const volatile __u32 cgroup_level = 0;
// 1: only TCP sockets with an end on a port in `ports` (Unix-domain
// sockets have none and are always kept; so are DNS queries).
const volatile __u8 by_port = 0;

struct sock_event {
	__u64 enter_ns; // CLOCK_MONOTONIC, at the syscall's entry
	__u64 exit_ns;
	__u32 pid; // the process (tgid)
	__u32 tid; // the thread
	__s64 bytes; // the syscall's return: whole, never cut
	__u32 seq; // TCP sequence of the first byte: write_seq / copied_seq at entry
	__u32 captured; // payload bytes that follow the header
	__s32 fd;
	__u16 family;
	__u16 kind;
	__u8 local_addr[16];
	__u8 remote_addr[16];
	__u16 local_port;
	__u16 remote_port;
	char comm[16];
	__u8 payload[MAX_PAYLOAD];
};

#define HEADER_SIZE __builtin_offsetof(struct sock_event, payload)

// A call between its entry and its exit, per thread.
struct pending {
	__u64 enter_ns;
	__u64 buf; // user address of the first buffer
	__u64 len; // that buffer's length
	struct sock *sk;
	__u32 seq;
	__s32 fd;
	__u32 task; // the thread, or in a Go process the goroutine
	__u16 kind;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u16);
	__type(value, __u8);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct pending);
} in_flight SEC(".maps");

// An OpenSSL call between its entry and its return, per thread. Its socket
// is the one the first socket call nested in it used (curl's own BIO has no
// fd in the SSL object), else the one the same SSL object used before.
struct ssl_call {
	__u64 enter_ns;
	__u64 ssl;
	__u64 buf;
	__u64 len;
	__u64 done; // SSL_*_ex: where the byte count is written
	struct sock *sk;
	__s32 fd;
	__u16 kind;
};

struct ssl_socket {
	struct sock *sk;
	__s32 fd;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct ssl_call);
} ssl_in_flight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct ssl_socket);
} ssl_sockets SEC(".maps");

// Processes running Go code: marked by the first Go uprobe that fires in
// them (the runtime starts goroutines before main runs).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} go_pids SEC(".maps");

// A crypto/tls Read or Write between its entry and a return, by process
// and goroutine (its `g`; replicas of one binary have the same heap
// addresses): a Read that waits parks the goroutine and may return on
// another thread.
struct go_task_key {
	__u64 g;
	__u32 pid;
	__u32 pad;
};

struct go_tls_call {
	__u64 enter_ns;
	__u64 conn;
	__u64 buf;
	__u64 len;
	__u16 kind;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct go_task_key);
	__type(value, struct go_tls_call);
} go_tls_in_flight SEC(".maps");

// runtime.newproc1 between its entry and a return, by thread (it runs on
// the thread's system stack): the goroutine that asked for the new one.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} go_spawning SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sock_event);
} scratch SEC(".maps");

// Events the ring buffer had no room for: counted, never silent.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 32 << 20);
} events SEC(".maps");

static __always_inline int traced(__u32 pid)
{
	if (trace_all || bpf_map_lookup_elem(&pids, &pid))
		return 1;
	return cgroup_id && bpf_get_current_ancestor_cgroup_id(cgroup_level) == cgroup_id;
}

static __always_inline int port_kept(struct sock *sk)
{
	if (!by_port)
		return 1;
	__u16 local = BPF_CORE_READ(sk, __sk_common.skc_num);
	__u16 remote = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	return bpf_map_lookup_elem(&ports, &local) || bpf_map_lookup_elem(&ports, &remote);
}

static __always_inline void count_lost(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&lost, &zero);
	if (n)
		*n += 1;
}

// A goroutine as a task id: its `g` (8-byte aligned, in one heap arena)
// with the top bit set, which no thread id has (pid_max is at most 2^22).
static __always_inline __u32 goroutine_task(__u64 g)
{
	return 0x80000000u | (__u32)((g >> 3) & 0x7fffffff);
}

// Whether `g` is a goroutine: its m (g.m, at 48 since Go 1.5: the linker
// knows the offset) has a g0 (m.g0, its first field) whose m is that m.
// C code in a Go process (cgo, a library's own threads) leaves anything
// in R14.
static __always_inline int is_goroutine(__u64 g)
{
	__u64 m = 0, g0 = 0, m_of_g0 = 0;
	if (!g || bpf_probe_read_user(&m, sizeof(m), (void *)(g + 48)) < 0 || !m)
		return 0;
	if (bpf_probe_read_user(&g0, sizeof(g0), (void *)m) < 0 || !g0)
		return 0;
	if (bpf_probe_read_user(&m_of_g0, sizeof(m_of_g0), (void *)(g0 + 48)) < 0)
		return 0;
	return m_of_g0 == m;
}

// Who made the current syscall: the thread, or in a Go process the
// goroutine, which Go's register ABI keeps in R14 (Go >= 1.17 on x86_64).
static __always_inline __u32 current_task(struct pt_regs *regs, __u64 id)
{
	__u32 pid = id >> 32;
	if (!bpf_map_lookup_elem(&go_pids, &pid))
		return (__u32)id;
	__u64 g = BPF_CORE_READ(regs, r14);
	return is_goroutine(g) ? goroutine_task(g) : (__u32)id;
}

// The reader is woken once this much waits in the ring buffer, not for
// every event: a wake-up per event cost a traced nginx half its requests
// per second (bench/ebpf_overhead.sh). It also looks every 100 ms.
#define WAKEUP_BYTES (1 << 20)

static __always_inline void emit(struct sock_event *e, __u64 size)
{
	__u64 flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES ?
			      BPF_RB_FORCE_WAKEUP :
			      BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&events, e, size, flags) < 0)
		count_lost();
}

// The name a Unix-domain socket's connection goes by: its own (a server's
// accepted socket shares its listener's) else its peer's; `own` says which.
static __always_inline struct unix_address *unix_name_of(struct sock *sk, __u32 *own)
{
	struct unix_sock *u = (struct unix_sock *)sk;
	struct unix_address *addr = BPF_CORE_READ(u, addr);
	*own = addr != NULL;
	if (addr)
		return addr;
	struct sock *peer = BPF_CORE_READ(u, peer);
	return peer ? BPF_CORE_READ((struct unix_sock *)peer, addr) : NULL;
}

static __always_inline struct unix_address *unix_name(struct sock *sk)
{
	__u32 own;
	return unix_name_of(sk, &own);
}

static __always_inline __u64 socket_inode(struct sock *sk)
{
	return sk ? BPF_CORE_READ(sk, sk_socket, file, f_inode, i_ino) : 0;
}

// A UDP socket connected to a DNS server's port: a stub resolver's (glibc
// and c-ares connect theirs before they send), or NULL.
static __always_inline struct sock *dns_socket(struct socket *socket)
{
	struct sock *sk = BPF_CORE_READ(socket, sk);
	if (!sk || BPF_CORE_READ(sk, sk_protocol) != IPPROTO_UDP)
		return NULL;
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return NULL;
	__u16 remote = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	return remote == DNS_PORT ? sk : NULL;
}

// The socket behind `fd` of the current task, or NULL: TCP over
// IPv4/IPv6, a Unix-domain socket with a name at one end (a server's
// path: PostgreSQL's, Redis'), or a stub resolver's UDP socket; an unnamed
// socketpair is a process talking to itself, not a backing call.
static __always_inline struct sock *traced_socket(int fd)
{
	struct task_struct *task = (void *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd < 0 || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *file = NULL;
	bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]);
	if (!file)
		return NULL;
	umode_t mode = BPF_CORE_READ(file, f_inode, i_mode);
	if ((mode & S_IFMT) != S_IFSOCK)
		return NULL;
	struct socket *socket = BPF_CORE_READ(file, private_data);
	if (!socket)
		return NULL;
	short type = BPF_CORE_READ(socket, type);
	if (type == SOCK_DGRAM)
		return dns_socket(socket);
	if (type != SOCK_STREAM)
		return NULL;
	struct sock *sk = BPF_CORE_READ(socket, sk);
	if (!sk)
		return NULL;
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family == AF_UNIX)
		return unix_name(sk) ? sk : NULL;
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return NULL;
	if (family != AF_INET && family != AF_INET6)
		return NULL;
	return port_kept(sk) ? sk : NULL;
}

// The first buffer of an iovec array.
static __always_inline void first_iov(__u64 iov, __u64 *buf, __u64 *len)
{
	struct iovec v = {};
	bpf_probe_read_user(&v, sizeof(v), (void *)iov);
	*buf = (__u64)v.iov_base;
	*len = v.iov_len;
}

SEC("raw_tracepoint/sys_enter")
int sys_enter(__u64 *ctx)
{
	long nr = ctx[1];
	__u16 kind;
	switch (nr) {
	case NR_WRITE:
	case NR_WRITEV:
	case NR_SENDTO:
	case NR_SENDMSG:
	case NR_SENDMMSG:
		kind = KIND_SEND;
		break;
	case NR_READ:
	case NR_READV:
	case NR_RECVFROM:
	case NR_RECVMSG:
		kind = KIND_RECV;
		break;
	default:
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id >> 32))
		return 0;
	struct pt_regs *regs = (struct pt_regs *)ctx[0];
	int fd = (int)BPF_CORE_READ(regs, di);
	struct sock *sk = traced_socket(fd);
	if (!sk)
		return 0;
	// sendmmsg returns messages, not bytes: a stream's byte count would be
	// wrong, so only a stub resolver's datagrams are taken from it.
	if (nr == NR_SENDMMSG && BPF_CORE_READ(sk, sk_protocol) != IPPROTO_UDP)
		return 0;
	struct pending p = {
		.enter_ns = bpf_ktime_get_ns(),
		.sk = sk,
		.fd = fd,
		.task = current_task(regs, id),
		.kind = kind,
	};
	__u64 arg = BPF_CORE_READ(regs, si);
	__u64 len = BPF_CORE_READ(regs, dx);
	switch (nr) {
	case NR_READV:
	case NR_WRITEV:
		first_iov(arg, &p.buf, &p.len);
		break;
	case NR_SENDMSG:
	case NR_RECVMSG:
	// sendmmsg's first mmsghdr opens with its msghdr (glibc sends a
	// lookup's A and AAAA in one call).
	case NR_SENDMMSG: {
		struct user_msghdr msg = {};
		bpf_probe_read_user(&msg, sizeof(msg), (void *)arg);
		first_iov((__u64)msg.msg_iov, &p.buf, &p.len);
		break;
	}
	default:
		p.buf = arg;
		p.len = len;
	}
	if (BPF_CORE_READ(sk, __sk_common.skc_family) != AF_UNIX &&
	    BPF_CORE_READ(sk, sk_protocol) == IPPROTO_TCP) {
		struct tcp_sock *tp = (struct tcp_sock *)sk;
		p.seq = kind == KIND_SEND ? BPF_CORE_READ(tp, write_seq) :
					    BPF_CORE_READ(tp, copied_seq);
	}
	__u32 tid = (__u32)id;
	bpf_map_update_elem(&in_flight, &tid, &p, BPF_ANY);
	struct ssl_call *ssl = bpf_map_lookup_elem(&ssl_in_flight, &tid);
	if (ssl && !ssl->sk) {
		ssl->sk = sk;
		ssl->fd = fd;
	}
	return 0;
}

// A Unix-domain socket's ends are its inode and its peer's (as `ss -x`
// shows them), in the first 8 bytes of each address; ports stay 0.
static __always_inline void fill_addresses(struct sock_event *e, struct sock *sk)
{
	e->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (e->family == AF_UNIX) {
		__u64 own = socket_inode(sk);
		__u64 peer = socket_inode(BPF_CORE_READ((struct unix_sock *)sk, peer));
		__builtin_memcpy(e->local_addr, &own, 8);
		__builtin_memcpy(e->remote_addr, &peer, 8);
		e->local_port = e->remote_port = 0;
		return;
	}
	e->local_port = BPF_CORE_READ(sk, __sk_common.skc_num);
	e->remote_port = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (e->family == AF_INET) {
		bpf_core_read(e->local_addr, 4, &sk->__sk_common.skc_rcv_saddr);
		bpf_core_read(e->remote_addr, 4, &sk->__sk_common.skc_daddr);
	} else {
		bpf_core_read(e->local_addr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(e->remote_addr, 16, &sk->__sk_common.skc_v6_daddr);
	}
}

// Fills the header of `e` with a call of `task` (a thread of the current
// process, or a goroutine) on `sk`.
static __always_inline void fill_call(struct sock_event *e, __u32 task, __u64 enter_ns,
				      __u64 bytes, __u32 seq, __s32 fd, __u16 kind,
				      struct sock *sk)
{
	__u64 id = bpf_get_current_pid_tgid();
	e->enter_ns = enter_ns;
	e->exit_ns = bpf_ktime_get_ns();
	e->pid = id >> 32;
	e->tid = task;
	e->bytes = bytes;
	e->seq = seq;
	e->fd = fd;
	e->kind = kind;
	fill_addresses(e, sk);
	bpf_get_current_comm(e->comm, sizeof(e->comm));
}

// Fills `e` with a call of `task` that moved `bytes` from or to user
// memory at `buf` (of `len` bytes), and hands it over.
static __always_inline void send_call(struct sock_event *e, __u32 task, __u64 enter_ns,
				      __u64 bytes, __u32 seq, __s32 fd, __u16 kind,
				      struct sock *sk, __u64 buf, __u64 len)
{
	fill_call(e, task, enter_ns, bytes, seq, fd, kind, sk);
	__u64 n = bytes < len ? bytes : len;
	if (n > MAX_PAYLOAD)
		n = MAX_PAYLOAD;
	if (bpf_probe_read_user(e->payload, n, (void *)buf) < 0)
		n = 0;
	e->captured = n;
	emit(e, HEADER_SIZE + n);
}

// A TLS library call's plaintext goes out in chunks of MAX_PAYLOAD, up to
// this many: an HTTP/2 reader asks for 16-32 KiB at a time (Go's gRPC
// transport reads 32 KiB), and a gap in its frames loses the connection's
// HPACK state. Past them the rest is a gap, counted whole.
#define MAX_CHUNKS 16

// As send_call, for a library call: `bytes` in chunks of MAX_PAYLOAD,
// each its own event (the byte counts add up to `bytes`). Branch-free per
// chunk, or the verifier walks 2^MAX_CHUNKS paths.
static __always_inline void send_chunks(struct sock_event *e, __u32 task, __u64 enter_ns,
					__u64 bytes, __s32 fd, __u16 kind, struct sock *sk,
					__u64 buf)
{
	fill_call(e, task, enter_ns, 0, 0, fd, kind, sk);
	__u64 chunks = (bytes + MAX_PAYLOAD - 1) / MAX_PAYLOAD;
	if (chunks > MAX_CHUNKS)
		chunks = MAX_CHUNKS;
	__u64 flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES ?
			      BPF_RB_FORCE_WAKEUP :
			      BPF_RB_NO_WAKEUP;
	for (__u32 i = 0; i < MAX_CHUNKS; i++) {
		if (i >= chunks)
			break;
		__u64 off = (__u64)i * MAX_PAYLOAD;
		// The last chunk carries the rest, whole; it holds what fits.
		__u64 n = i + 1 == chunks ? bytes - off : MAX_PAYLOAD;
		__u32 copy = n < MAX_PAYLOAD ? n : MAX_PAYLOAD;
		// On a fault the payload reads as zeros: no protocol's bytes.
		bpf_probe_read_user(e->payload, copy & (2 * MAX_PAYLOAD - 1), (void *)(buf + off));
		e->bytes = n;
		e->captured = copy;
		if (bpf_ringbuf_output(&events, e, HEADER_SIZE + (copy & (2 * MAX_PAYLOAD - 1)),
				       flags) < 0)
			count_lost();
	}
}

// sizeof(sockaddr_un.sun_path), and the sun_family before it.
#define UNIX_PATH_MAX 108
#define SUN_FAMILY_SIZE 2

// Unix-domain sockets already named to the reader, by inode.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u8);
} unix_named SEC(".maps");

// The first call on a Unix-domain socket is preceded by its name: the path
// (seq 1 when it is the socket's own, a server's), once per socket.
static __always_inline void name_unix_socket(struct sock_event *e, struct pending *call)
{
	// A local copy: CO-RE would try to relocate the access to `call`'s own
	// (non-kernel) struct.
	struct sock *sk = call->sk;
	if (BPF_CORE_READ(sk, __sk_common.skc_family) != AF_UNIX)
		return;
	__u64 inode = socket_inode(sk);
	if (bpf_map_lookup_elem(&unix_named, &inode))
		return;
	__u8 one = 1;
	bpf_map_update_elem(&unix_named, &inode, &one, BPF_ANY);
	__u32 own;
	struct unix_address *addr = unix_name_of(sk, &own);
	if (!addr)
		return;
	int len = BPF_CORE_READ(addr, len);
	if (len <= SUN_FAMILY_SIZE || len > SUN_FAMILY_SIZE + UNIX_PATH_MAX)
		return;
	// Masked where it is used: the verifier loses the bounds across spills.
	__u32 n = len - SUN_FAMILY_SIZE;
	fill_call(e, call->task, call->enter_ns, 0, own, call->fd, KIND_UNIX_NAME, sk);
	// name[] is a flexible array: its sun_path is past sun_family.
	if (bpf_probe_read_kernel(e->payload, n & 127, (char *)addr->name + SUN_FAMILY_SIZE) < 0)
		return;
	e->captured = n & 127;
	emit(e, HEADER_SIZE + (n & 127));
}

SEC("raw_tracepoint/sys_exit")
int sys_exit(__u64 *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct pending *p = bpf_map_lookup_elem(&in_flight, &tid);
	if (!p)
		return 0;
	long ret = ctx[1];
	struct pending call = *p;
	bpf_map_delete_elem(&in_flight, &tid);
	if (ret <= 0)
		return 0;
	__u32 zero = 0;
	struct sock_event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 0;
	name_unix_socket(e, &call);
	send_call(e, call.task, call.enter_ns, ret, call.seq, call.fd, call.kind, call.sk, call.buf,
		  call.len);
	return 0;
}

// The scratch event, its header cleared, for a thread's start or end now.
static __always_inline struct sock_event *thread_event(__u32 pid, __u32 tid, __u16 kind)
{
	__u32 zero = 0;
	struct sock_event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return NULL;
	__builtin_memset(e, 0, HEADER_SIZE);
	e->enter_ns = bpf_ktime_get_ns();
	e->exit_ns = e->enter_ns;
	e->pid = pid;
	e->tid = tid;
	e->kind = kind;
	return e;
}

// A new thread of a traced process, or a traced process's child: children
// are traced too (pre-fork servers), and a thread's parent says which
// request it may have been started for.
SEC("raw_tracepoint/sched_process_fork")
int process_fork(__u64 *ctx)
{
	struct task_struct *parent = (struct task_struct *)ctx[0];
	struct task_struct *child = (struct task_struct *)ctx[1];
	__u32 parent_pid = BPF_CORE_READ(parent, tgid);
	if (!traced(parent_pid))
		return 0;
	__u32 child_pid = BPF_CORE_READ(child, tgid);
	if (child_pid != parent_pid && !trace_all) {
		__u8 one = 1;
		bpf_map_update_elem(&pids, &child_pid, &one, BPF_ANY);
	}
	struct sock_event *e = thread_event(child_pid, BPF_CORE_READ(child, pid), KIND_THREAD);
	if (!e)
		return 0;
	// For a thread event, `seq` carries the parent thread's id.
	e->seq = BPF_CORE_READ(parent, pid);
	BPF_CORE_READ_INTO(&e->comm, child, comm);
	emit(e, HEADER_SIZE);
	return 0;
}

// A thread of a traced process ends: a thread started for one request and
// ended with it made that request's calls, where a pool thread lives on.
// A thread killed inside a call never reaches sys_exit: its entries go
// here, or they would fill the maps.
SEC("raw_tracepoint/sched_process_exit")
int process_exit(__u64 *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id >> 32))
		return 0;
	__u32 tid = (__u32)id;
	bpf_map_delete_elem(&in_flight, &tid);
	bpf_map_delete_elem(&ssl_in_flight, &tid);
	bpf_map_delete_elem(&go_spawning, &tid);
	// A pid is reused; a Go program may exec another (gosu does).
	if (tid == id >> 32) {
		__u32 pid = tid;
		bpf_map_delete_elem(&go_pids, &pid);
	}
	struct sock_event *e = thread_event(id >> 32, tid, KIND_THREAD_END);
	if (!e)
		return 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	emit(e, HEADER_SIZE);
	return 0;
}

static __always_inline int ssl_enter(struct pt_regs *ctx, __u16 kind, int ex)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id >> 32))
		return 0;
	struct ssl_call call = {
		.enter_ns = bpf_ktime_get_ns(),
		.ssl = PT_REGS_PARM1(ctx),
		.buf = PT_REGS_PARM2(ctx),
		.len = PT_REGS_PARM3(ctx),
		.done = ex ? PT_REGS_PARM4(ctx) : 0,
		.fd = -1,
		.kind = kind,
	};
	__u32 tid = (__u32)id;
	bpf_map_update_elem(&ssl_in_flight, &tid, &call, BPF_ANY);
	return 0;
}

static __always_inline int ssl_exit(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct ssl_call *p = bpf_map_lookup_elem(&ssl_in_flight, &tid);
	if (!p)
		return 0;
	struct ssl_call call = *p;
	bpf_map_delete_elem(&ssl_in_flight, &tid);
	// All four return an int: the upper half of the register is not theirs.
	int ret = (int)PT_REGS_RC(ctx);
	__u64 bytes = 0;
	if (call.done) {
		// SSL_read_ex/SSL_write_ex return 1 and write the count.
		if (ret != 1)
			return 0;
		bpf_probe_read_user(&bytes, sizeof(bytes), (void *)call.done);
	} else if (ret > 0) {
		bytes = ret;
	}
	if (bytes == 0)
		return 0;
	if (call.sk) {
		struct ssl_socket known = { .sk = call.sk, .fd = call.fd };
		bpf_map_update_elem(&ssl_sockets, &call.ssl, &known, BPF_ANY);
	} else {
		struct ssl_socket *known = bpf_map_lookup_elem(&ssl_sockets, &call.ssl);
		if (!known)
			return 0;
		call.sk = known->sk;
		call.fd = known->fd;
	}
	__u32 zero = 0;
	struct sock_event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 0;
	if (bytes > call.len)
		bytes = call.len;
	send_chunks(e, tid, call.enter_ns, bytes, call.fd, call.kind, call.sk, call.buf);
	return 0;
}

// int SSL_write(SSL *, const void *, int); int SSL_read(SSL *, void *, int);
// int SSL_write_ex(SSL *, const void *, size_t, size_t *written); and the
// same for SSL_read_ex (Python's ssl module calls the _ex ones).
SEC("uprobe/SSL_write")
int ssl_write(struct pt_regs *ctx)
{
	return ssl_enter(ctx, KIND_TLS_SEND, 0);
}

SEC("uprobe/SSL_write_ex")
int ssl_write_ex(struct pt_regs *ctx)
{
	return ssl_enter(ctx, KIND_TLS_SEND, 1);
}

SEC("uprobe/SSL_read")
int ssl_read(struct pt_regs *ctx)
{
	return ssl_enter(ctx, KIND_TLS_RECV, 0);
}

SEC("uprobe/SSL_read_ex")
int ssl_read_ex(struct pt_regs *ctx)
{
	return ssl_enter(ctx, KIND_TLS_RECV, 1);
}

SEC("uretprobe/SSL_call")
int ssl_return(struct pt_regs *ctx)
{
	return ssl_exit(ctx);
}

// Go: the loader attaches these to a Go binary's functions, the returns
// at each RET instruction of the function (a uretprobe rewrites the
// return address on the stack, and Go moves goroutine stacks). Arguments
// and results are in registers (ABIInternal): RAX, RBX, RCX, ...; R14 is
// the running goroutine's g.

static __always_inline void mark_go(__u32 pid)
{
	__u8 one = 1;
	bpf_map_update_elem(&go_pids, &pid, &one, BPF_NOEXIST);
}

// The descriptor under a *crypto/tls.Conn: its `conn` (a net.Conn, first
// field) holds a *net.TCPConn (or UnixConn), whose netFD's poll.FD has
// Sysfd after its 16-byte fdMutex. These layouts have not moved since
// Go 1.0; a Conn over some other net.Conn reads a value that is no
// traced socket, and is skipped.
static __always_inline int go_conn_fd(__u64 conn)
{
	__u64 inner = 0, fd_ptr = 0;
	__s64 fd = -1;
	bpf_probe_read_user(&inner, sizeof(inner), (void *)(conn + 8));
	if (!inner)
		return -1;
	bpf_probe_read_user(&fd_ptr, sizeof(fd_ptr), (void *)inner);
	if (!fd_ptr)
		return -1;
	bpf_probe_read_user(&fd, sizeof(fd), (void *)(fd_ptr + 16));
	return fd >= 0 && fd < (1 << 20) ? (int)fd : -1;
}

// Hands over `bytes` of plaintext at `buf` that goroutine `g` moved
// through the crypto/tls Conn `conn`, if its socket is traced.
static __always_inline void go_tls_plaintext(__u64 g, __u64 enter_ns, __s64 bytes, __u64 conn,
					     __u16 kind, __u64 buf)
{
	if (bytes <= 0)
		return;
	int fd = go_conn_fd(conn);
	struct sock *sk = traced_socket(fd);
	if (!sk)
		return;
	__u32 zero = 0;
	struct sock_event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return;
	send_chunks(e, goroutine_task(g), enter_ns, bytes, fd, kind, sk, buf);
}

static __always_inline int go_tls_enter(struct pt_regs *ctx, __u16 kind)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id >> 32))
		return 0;
	mark_go(id >> 32);
	struct go_task_key g = { .g = ctx->r14, .pid = id >> 32 };
	struct go_tls_call call = {
		.enter_ns = bpf_ktime_get_ns(),
		.conn = ctx->ax,
		.buf = ctx->bx,
		.len = ctx->cx,
		.kind = kind,
	};
	bpf_map_update_elem(&go_tls_in_flight, &g, &call, BPF_ANY);
	return 0;
}

// func (c *Conn) Write(b []byte) (int, error): the plaintext at the entry
// only, no probe at its returns (each a single-stepped trap). Write sends
// all of b or fails, and a failed write leaves the connection broken: its
// bytes are taken as sent, and the call's end is its entry.
SEC("uprobe/go_tls_write")
int go_tls_write(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id >> 32))
		return 0;
	mark_go(id >> 32);
	go_tls_plaintext(ctx->r14, bpf_ktime_get_ns(), (__s64)ctx->cx, ctx->ax, KIND_TLS_SEND,
			 ctx->bx);
	return 0;
}

// func (c *Conn) Read(b []byte) (int, error)
SEC("uprobe/go_tls_read")
int go_tls_read(struct pt_regs *ctx)
{
	return go_tls_enter(ctx, KIND_TLS_RECV);
}

// At a RET of Read: RAX is the byte count.
SEC("uprobe/go_tls_return")
int go_tls_return(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id >> 32))
		return 0;
	struct go_task_key g = { .g = ctx->r14, .pid = id >> 32 };
	struct go_tls_call *p = bpf_map_lookup_elem(&go_tls_in_flight, &g);
	if (!p)
		return 0;
	struct go_tls_call call = *p;
	bpf_map_delete_elem(&go_tls_in_flight, &g);
	__s64 bytes = (__s64)ctx->ax;
	if (bytes > 0 && (__u64)bytes > call.len)
		bytes = call.len;
	go_tls_plaintext(g.g, call.enter_ns, bytes, call.conn, call.kind, call.buf);
	return 0;
}

// func newproc1(fn *funcval, callergp *g, callerpc uintptr, ...) *g
SEC("uprobe/go_newproc1")
int go_newproc1(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id >> 32))
		return 0;
	mark_go(id >> 32);
	__u32 tid = (__u32)id;
	__u64 parent = ctx->bx;
	bpf_map_update_elem(&go_spawning, &tid, &parent, BPF_ANY);
	return 0;
}

// At a RET of newproc1: RAX is the new goroutine, started by the one saved.
SEC("uprobe/go_newproc1_return")
int go_newproc1_return(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	__u64 *parent = bpf_map_lookup_elem(&go_spawning, &tid);
	if (!parent)
		return 0;
	__u64 by = *parent;
	bpf_map_delete_elem(&go_spawning, &tid);
	__u64 g = ctx->ax;
	if (!g || !by)
		return 0;
	struct sock_event *e = thread_event(id >> 32, goroutine_task(g), KIND_THREAD);
	if (!e)
		return 0;
	e->seq = goroutine_task(by);
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	emit(e, HEADER_SIZE);
	return 0;
}

// func goexit1(): the running goroutine ends.
SEC("uprobe/go_goexit1")
int go_goexit1(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id >> 32))
		return 0;
	struct go_task_key g = { .g = ctx->r14, .pid = id >> 32 };
	bpf_map_delete_elem(&go_tls_in_flight, &g);
	struct sock_event *e = thread_event(id >> 32, goroutine_task(g.g), KIND_THREAD_END);
	if (!e)
		return 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	emit(e, HEADER_SIZE);
	return 0;
}

// A traced process runs another program: what it was (Go or not) is gone.
SEC("raw_tracepoint/sched_process_exec")
int process_exec(__u64 *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	bpf_map_delete_elem(&go_pids, &pid);
	return 0;
}
