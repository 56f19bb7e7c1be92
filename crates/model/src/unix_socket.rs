//! Unix-domain stream sockets in a model keyed by socket addresses. A
//! connection over one (PostgreSQL's or Redis' local socket) is seen only
//! by the eBPF source; it gets addresses in `100::/64`, the discard-only
//! prefix (RFC 6666) that never appears on a wire, so that every detector
//! and join keyed by addresses takes it as it is, and its path is kept on
//! the connection (`Connection::socket_path`) for people to read.
//!
//! - the server end: `[100::<FNV-1a of the path, 32 bits>]:<port>`, one
//!   address per path, so the calls to one server group as over TCP;
//! - the client end: `[100::1:<its socket's inode>]:0`, one per socket;
//! - the port: PostgreSQL's own, when the path is `….s.PGSQL.<port>`, else 0.

use std::net::{Ipv6Addr, SocketAddr};

const PREFIX: u16 = 0x0100;

/// The address that stands for the server end of connections to `path`.
pub fn server_address(path: &str) -> SocketAddr {
    let hash = fnv1a(path.as_bytes());
    let ip = Ipv6Addr::new(PREFIX, 0, 0, 0, 0, 0, (hash >> 16) as u16, hash as u16);
    SocketAddr::new(ip.into(), port_in(path))
}

/// The address that stands for a client socket, by its inode.
pub fn client_address(inode: u64) -> SocketAddr {
    let [a, b, c, d] = [inode >> 48, inode >> 32, inode >> 16, inode].map(|w| w as u16);
    let ip = Ipv6Addr::new(PREFIX, 0, 0, 1, a, b, c, d);
    SocketAddr::new(ip.into(), 0)
}

/// Whether `addr` stands for a Unix-domain socket end.
pub fn is_unix_socket(addr: SocketAddr) -> bool {
    matches!(addr.ip(), std::net::IpAddr::V6(ip) if ip.segments()[..3] == [PREFIX, 0, 0])
}

/// The port a path names: PostgreSQL's sockets are `.s.PGSQL.<port>`.
fn port_in(path: &str) -> u16 {
    path.rsplit_once(".s.PGSQL.")
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or(0)
}

fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_one_server_and_each_socket_its_own_client() {
        let pg = server_address("/var/run/postgresql/.s.PGSQL.5432");
        assert_eq!(pg, server_address("/var/run/postgresql/.s.PGSQL.5432"));
        assert_eq!(pg.port(), 5432);
        assert_ne!(pg, server_address("/tmp/.s.PGSQL.5432"));
        assert_eq!(server_address("/run/redis/redis.sock").port(), 0);
        assert_ne!(client_address(7), client_address(8));
        assert_ne!(client_address(0), server_address(""));
        for a in [pg, client_address(u64::MAX)] {
            assert!(is_unix_socket(a), "{a}");
        }
        assert!(!is_unix_socket("[::1]:5432".parse().unwrap()));
        assert!(!is_unix_socket("127.0.0.1:5432".parse().unwrap()));
    }
}
