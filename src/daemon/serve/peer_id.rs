//! Who is at the other end of a connection: how it came (`Peer`), and, for
//! per-peer caps, its identity: the uid on the control socket (from the
//! kernel), the remote address on TCP (an IPv6 one by its /64) — except for a
//! connection from this host (from loopback, or to one of its own addresses),
//! where every local user shares the address: there the owner of the client's
//! socket is looked up once, when the connection is accepted, in
//! `/proc/net/tcp{,6}` (as identd does), so one local user cannot take every
//! place from the others.

use std::io::BufRead;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// How a request reached the daemon, attached to each request by the listener.
#[derive(Clone, Debug)]
pub enum Peer {
    /// The control socket; the peer's credentials from the kernel.
    Socket { uid: u32, pid: Option<i32> },
    /// The TCP listener (status, metrics; state changes only with the token).
    /// `owner`: for a connection from this host, the uid owning the client's
    /// socket, when it could be found.
    Tcp {
        remote: SocketAddr,
        owner: Option<u32>,
    },
}

impl Peer {
    /// A TCP peer, its owner looked up when it connects from this host
    /// (blocking: read `/proc`; call it off the async threads).
    pub fn tcp(remote: SocketAddr, local: SocketAddr) -> Peer {
        let owner = from_this_host(remote, local)
            .then(|| owner_of(remote, local))
            .flatten();
        Peer::Tcp { remote, owner }
    }
}

/// A peer's identity for caps: `uid:1000`, `ip:203.0.113.9` or
/// `ip:2001:db8:1:2::/64`.
pub fn identity(peer: &Peer) -> String {
    match peer {
        Peer::Socket { uid, .. } => format!("uid:{uid}"),
        Peer::Tcp {
            owner: Some(uid), ..
        } => format!("uid:{uid}"),
        Peer::Tcp { remote, .. } => match plain(remote.ip()) {
            IpAddr::V6(v6) => {
                let s = v6.segments();
                let net = Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
                format!("ip:{net}/64")
            }
            v4 => format!("ip:{v4}"),
        },
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 one.
fn plain(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// From loopback, or to the address it came from (a local user connecting
/// to one of the host's own addresses).
fn from_this_host(remote: SocketAddr, local: SocketAddr) -> bool {
    let r = plain(remote.ip());
    r.is_loopback() || r == plain(local.ip())
}

/// The most of each table read: past it (a host with very many sockets) the
/// owner is not found, and the peer counts by its address.
const TABLE_LIMIT: u64 = 32 << 20;

/// The uid owning the client's end of the connection `remote` → `local`.
fn owner_of(remote: SocketAddr, local: SocketAddr) -> Option<u32> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| {
            use std::io::Read;
            let file = std::fs::File::open(table).ok()?;
            let lines = std::io::BufReader::new(file.take(TABLE_LIMIT)).lines();
            lines
                .skip(1)
                .map_while(Result::ok)
                .find_map(|line| owner_in_line(&line, remote, local))
        })
}

/// The uid of a `/proc/net/tcp`-format row, if it is the established socket
/// whose local address is `remote` and whose remote address is `local` (the
/// client's end of this very connection: a row in TIME_WAIT, owned by no
/// one, or another connection from the same port does not match).
fn owner_in_line(line: &str, remote: SocketAddr, local: SocketAddr) -> Option<u32> {
    let f: Vec<&str> = line.split_whitespace().take(8).collect();
    const ESTABLISHED: &str = "01";
    if f.len() < 8 || f[3] != ESTABLISHED {
        return None;
    }
    let same =
        |a: SocketAddr, b: SocketAddr| a.port() == b.port() && plain(a.ip()) == plain(b.ip());
    (same(parse_addr(f[1])?, remote) && same(parse_addr(f[2])?, local))
        .then(|| f[7].parse().ok())
        .flatten()
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6): each 32-bit
/// word in the host's (little-endian) byte order.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let w = u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok()?;
        Some(w.to_le_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(table: &str, remote: &str, local: &str) -> Option<u32> {
        let (remote, local) = (remote.parse().unwrap(), local.parse().unwrap());
        table
            .lines()
            .skip(1)
            .find_map(|l| owner_in_line(l, remote, local))
    }

    const HEADER: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode";

    #[test]
    fn the_client_end_of_this_connection_names_its_owner() {
        let table = format!(
            "{HEADER}\n\
             0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n\
             1: 0100007F:D431 0100007F:1F91 01 00000000:00000000 00:00000000 00000000  1002        0 2\n\
             2: 0100007F:D431 0100007F:1F90 06 00000000:00000000 00:00000000 00000000     0        0 0\n\
             3: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 3\n"
        );
        // The listener's row, another connection from the same port, and a
        // TIME_WAIT row (uid 0) come first: only this connection's row counts.
        assert_eq!(
            find(&table, "127.0.0.1:54321", "127.0.0.1:8080"),
            Some(1000)
        );
        assert_eq!(find(&table, "127.0.0.1:1", "127.0.0.1:8080"), None);
        let v6 = format!(
            "{HEADER}\n0: 0000000000000000FFFF00000100007F:D431 0000000000000000FFFF00000100007F:1F90 01 0:0 0:0 0 1001 0 1\n"
        );
        assert_eq!(
            find(&v6, "[::ffff:127.0.0.1]:54321", "127.0.0.1:8080"),
            Some(1001)
        );
    }

    #[test]
    fn peers_are_their_uid_on_the_socket_and_their_address_or_network_afar() {
        assert_eq!(identity(&Peer::Socket { uid: 7, pid: None }), "uid:7");
        let far = |remote: &str| Peer::Tcp {
            remote: remote.parse().unwrap(),
            owner: None,
        };
        assert_eq!(identity(&far("203.0.113.9:4000")), "ip:203.0.113.9");
        // One /64 is one peer: its holder has 2^64 addresses.
        assert_eq!(
            identity(&far("[2001:db8:1:2:aaaa::1]:4000")),
            identity(&far("[2001:db8:1:2:bbbb::9]:4000"))
        );
        assert_eq!(
            identity(&far("[2001:db8:1:2::1]:4000")),
            "ip:2001:db8:1:2::/64"
        );
    }

    /// This process's own connections, to loopback and to the address it
    /// came from, are found under its own uid.
    #[test]
    fn a_live_connection_from_this_host_is_found_under_this_uid() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, remote) = listener.accept().unwrap();
        let uid = unsafe { libc::getuid() };
        let peer = Peer::tcp(remote, server.local_addr().unwrap());
        assert_eq!(identity(&peer), format!("uid:{uid}"));
        drop(client);
    }
}
