//! Classic BPF program keeping only TCP segments to or from given ports, and
//! DNS datagrams (UDP port 53, and UDP on the given ports: the lookups
//! behind a service's calls, a resolver on a port of its own), for
//! IPv4 and IPv6, on a SOCK_DGRAM packet socket (the filter sees the packet
//! from its network header; the EtherType comes from the skb).

/// Opcodes from linux/bpf_common.h and linux/filter.h.
const BPF_LD: u16 = 0x00;
const BPF_LDX: u16 = 0x01;
const BPF_JMP: u16 = 0x05;
const BPF_RET: u16 = 0x06;
const BPF_H: u16 = 0x08;
const BPF_B: u16 = 0x10;
const BPF_ABS: u16 = 0x20;
const BPF_IND: u16 = 0x40;
const BPF_MSH: u16 = 0xa0;
const BPF_JEQ: u16 = 0x10;
const BPF_JSET: u16 = 0x40;
const BPF_K: u16 = 0x00;

/// Ancillary load of skb->protocol (linux/filter.h: SKF_AD_OFF + SKF_AD_PROTOCOL).
const SKF_AD_PROTOCOL: u32 = (-0x1000i32) as u32;

const ETHERTYPE_IPV4: u32 = 0x0800;
const ETHERTYPE_IPV6: u32 = 0x86dd;
const IPPROTO_TCP: u32 = 6;
const IPPROTO_UDP: u32 = 17;
/// UDP ports kept whatever the TCP ports: DNS (RFC 1035 §4.2.1).
const UDP_PORTS: &[u16] = &[53];
/// IPv4 flags/fragment-offset field: the low 13 bits are the offset (RFC 791).
const IPV4_FRAG_OFFSET_MASK: u32 = 0x1fff;
/// Offsets in the IPv4 header (RFC 791) and IPv6 header (RFC 8200).
const IPV4_PROTOCOL: u32 = 9;
const IPV4_FRAG: u32 = 6;
const IPV6_NEXT_HEADER: u32 = 6;
const IPV6_HEADER: u32 = 40;

/// Ports a filter can test: each costs two instructions per address family
/// and jump offsets are 8-bit.
pub const MAX_PORTS: usize = 24;

/// One instruction, as `struct sock_filter` (linux/filter.h).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockFilter {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

#[derive(Clone, Copy)]
enum To {
    Next,
    Label(usize),
}

struct Asm {
    insns: Vec<(u16, To, To, u32)>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }
    fn here(&mut self, l: usize) {
        self.labels[l] = Some(self.insns.len());
    }
    fn op(&mut self, code: u16, k: u32) {
        self.insns.push((code, To::Next, To::Next, k));
    }
    fn jump(&mut self, code: u16, k: u32, jt: To, jf: To) {
        self.insns.push((code, jt, jf, k));
    }
    fn build(self) -> Option<Vec<SockFilter>> {
        let target = |i: usize, t: To| -> Option<u8> {
            match t {
                To::Next => Some(0),
                To::Label(l) => u8::try_from(self.labels[l]?.checked_sub(i + 1)?).ok(),
            }
        };
        self.insns
            .iter()
            .enumerate()
            .map(|(i, &(code, jt, jf, k))| {
                Some(SockFilter {
                    code,
                    jt: target(i, jt)?,
                    jf: target(i, jf)?,
                    k,
                })
            })
            .collect()
    }
}

/// The filter: accept (up to `snaplen` bytes) TCP with a source or
/// destination port in `ports` (all TCP when `ports` is empty), and UDP
/// to or from `UDP_PORTS` or `udp`.
pub fn ports_filter(ports: &[u16], udp: &[u16], snaplen: u32) -> Option<Vec<SockFilter>> {
    if ports.len() > MAX_PORTS || udp.len() > MAX_PORTS {
        return None;
    }
    let udp_ports: Vec<u16> = UDP_PORTS.iter().chain(udp).copied().collect();
    let mut a = Asm {
        insns: Vec::new(),
        labels: Vec::new(),
    };
    let (v4, v6, accept, drop) = (a.label(), a.label(), a.label(), a.label());
    let (v4_udp, v6_udp) = (a.label(), a.label());
    a.op(BPF_LD | BPF_H | BPF_ABS, SKF_AD_PROTOCOL);
    a.jump(
        BPF_JMP | BPF_JEQ | BPF_K,
        ETHERTYPE_IPV4,
        To::Label(v4),
        To::Next,
    );
    a.jump(
        BPF_JMP | BPF_JEQ | BPF_K,
        ETHERTYPE_IPV6,
        To::Label(v6),
        To::Label(drop),
    );

    a.here(v4);
    a.op(BPF_LD | BPF_H | BPF_ABS, IPV4_FRAG);
    // Later fragments carry no TCP or UDP header.
    a.jump(
        BPF_JMP | BPF_JSET | BPF_K,
        IPV4_FRAG_OFFSET_MASK,
        To::Label(drop),
        To::Next,
    );
    a.op(BPF_LDX | BPF_B | BPF_MSH, 0); // X = 4 * IHL
    a.op(BPF_LD | BPF_B | BPF_ABS, IPV4_PROTOCOL);
    a.jump(
        BPF_JMP | BPF_JEQ | BPF_K,
        IPPROTO_UDP,
        To::Label(v4_udp),
        To::Next,
    );
    a.jump(
        BPF_JMP | BPF_JEQ | BPF_K,
        IPPROTO_TCP,
        To::Next,
        To::Label(drop),
    );
    ports_test(&mut a, BPF_IND, 0, ports, accept, drop);
    a.here(v4_udp);
    ports_test(&mut a, BPF_IND, 0, &udp_ports, accept, drop);

    a.here(v6);
    a.op(BPF_LD | BPF_B | BPF_ABS, IPV6_NEXT_HEADER);
    a.jump(
        BPF_JMP | BPF_JEQ | BPF_K,
        IPPROTO_UDP,
        To::Label(v6_udp),
        To::Next,
    );
    a.jump(
        BPF_JMP | BPF_JEQ | BPF_K,
        IPPROTO_TCP,
        To::Next,
        To::Label(drop),
    );
    ports_test(&mut a, BPF_ABS, IPV6_HEADER, ports, accept, drop);
    a.here(v6_udp);
    ports_test(&mut a, BPF_ABS, IPV6_HEADER, &udp_ports, accept, drop);

    a.here(accept);
    a.op(BPF_RET | BPF_K, snaplen);
    a.here(drop);
    a.op(BPF_RET | BPF_K, 0);
    a.build()
}

/// Loads the source then destination port at `base` (+X when indexed) and
/// jumps to `accept` on a match.
fn ports_test(a: &mut Asm, mode: u16, base: u32, ports: &[u16], accept: usize, drop: usize) {
    if ports.is_empty() {
        a.jump(
            BPF_JMP | BPF_JEQ | BPF_K,
            0,
            To::Label(accept),
            To::Label(accept),
        );
        return;
    }
    for field in [base, base + 2] {
        a.op(BPF_LD | BPF_H | mode, field);
        for &p in ports {
            a.jump(
                BPF_JMP | BPF_JEQ | BPF_K,
                u32::from(p),
                To::Label(accept),
                To::Next,
            );
        }
    }
    a.jump(
        BPF_JMP | BPF_JEQ | BPF_K,
        0,
        To::Label(drop),
        To::Label(drop),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_within_jump_range() {
        assert!(ports_filter(&[], &[], 65535).is_some());
        let ports: Vec<u16> = (1..=MAX_PORTS as u16).collect();
        let f = ports_filter(&ports, &ports, 65535).unwrap();
        assert_eq!(f.last().unwrap().code, BPF_RET | BPF_K);
        assert!(ports_filter(&[1; MAX_PORTS + 1], &[], 65535).is_none());
        assert!(ports_filter(&[], &[1; MAX_PORTS + 1], 65535).is_none());
    }
}
