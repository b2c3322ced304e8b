//! Who is at the other end of a connection: how it came (`Peer`), and, for
//! per-peer caps, its identity: the uid on the control socket (from the
//! kernel), the remote address on TCP — except from loopback, where every
//! local user shares 127.0.0.1 and the owner of the other socket is looked
//! up in `/proc/net/tcp{,6}` (as identd does), so one local user cannot take
//! every place from the others.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// How a request reached the daemon, attached to each request by the listener.
#[derive(Clone, Debug)]
pub enum Peer {
    /// The control socket; the peer's credentials from the kernel.
    Socket { uid: u32, pid: Option<i32> },
    /// The TCP listener (status, metrics; state changes only with the token).
    Tcp { remote: SocketAddr },
}

/// A peer's identity for caps: `uid:1000` or `ip:203.0.113.9`.
pub fn identity(peer: &Peer) -> String {
    match peer {
        Peer::Socket { uid, .. } => format!("uid:{uid}"),
        Peer::Tcp { remote } if remote.ip().is_loopback() || is_mapped_loopback(remote.ip()) => {
            match loopback_owner(*remote) {
                Some(uid) => format!("uid:{uid}"),
                None => format!("ip:{}", remote.ip()),
            }
        }
        Peer::Tcp { remote } => format!("ip:{}", remote.ip()),
    }
}

fn is_mapped_loopback(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()))
}

/// The uid owning the local TCP socket at `addr` (the client's end of a
/// loopback connection).
fn loopback_owner(addr: SocketAddr) -> Option<u32> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| {
            // Bounded: a host with very many sockets is looked up no further
            // than this, and the peer counts by its address instead.
            use std::io::Read;
            let mut text = Vec::new();
            std::fs::File::open(table)
                .ok()?
                .take(32 << 20)
                .read_to_end(&mut text)
                .ok()?;
            owner_in(&String::from_utf8_lossy(&text), addr)
        })
}

/// In a `/proc/net/tcp`-format table, the uid of the socket whose local
/// address is `addr`.
fn owner_in(table: &str, addr: SocketAddr) -> Option<u32> {
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let local = parse_addr(f.get(1)?)?;
        (same(local, addr)).then(|| f.get(7)?.parse().ok())?
    })
}

/// Equal, reading an IPv4-mapped IPv6 address as the IPv4 one.
fn same(a: SocketAddr, b: SocketAddr) -> bool {
    let plain = |s: SocketAddr| match s.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    a.port() == b.port() && plain(a) == plain(b)
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

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n   1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 2 1 0 20 4 30 10 -1\n";

    #[test]
    fn the_client_end_of_a_loopback_connection_names_its_owner() {
        let client: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        assert_eq!(owner_in(TABLE, client), Some(1000));
        assert_eq!(owner_in(TABLE, "127.0.0.1:8080".parse().unwrap()), Some(0));
        assert_eq!(owner_in(TABLE, "127.0.0.1:1".parse().unwrap()), None);
        let v6 = "   0: 0000000000000000FFFF00000100007F:D431 0000000000000000FFFF00000100007F:1F90 01 0:0 0:0 0 1001 0 1";
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:54321".parse().unwrap();
        assert_eq!(owner_in(&format!("header\n{v6}\n"), mapped), Some(1001));
        assert_eq!(owner_in(&format!("header\n{v6}\n"), client), Some(1001));
    }

    #[test]
    fn peers_are_their_uid_on_the_socket_and_their_address_afar() {
        assert_eq!(identity(&Peer::Socket { uid: 7, pid: None }), "uid:7");
        let far = Peer::Tcp {
            remote: "203.0.113.9:4000".parse().unwrap(),
        };
        assert_eq!(identity(&far), "ip:203.0.113.9");
    }

    /// This process's own loopback connection is found under its own uid.
    #[test]
    fn a_live_loopback_connection_is_found_under_this_uid() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, remote) = listener.accept().unwrap();
        let uid = unsafe { libc::getuid() };
        assert_eq!(identity(&Peer::Tcp { remote }), format!("uid:{uid}"));
        drop(client);
    }
}
