//! Just enough IPv4 parsing for switching and for payload corruption.

use std::net::Ipv4Addr;
use std::ops::Range;

/// The IPv4 destination of a raw IP packet, if it is IPv4.
pub fn ipv4_dst(pkt: &[u8]) -> Option<Ipv4Addr> {
    if pkt.len() < 20 || pkt[0] >> 4 != 4 {
        return None;
    }
    Some(Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]))
}

/// The byte range that corruption may touch: the transport payload when
/// there is one, else the transport header, never the IP header (so the
/// packet still reaches its destination and the checksum there sees it).
pub fn corruptible_range(pkt: &[u8]) -> Range<usize> {
    let n = pkt.len();
    if n < 20 || pkt[0] >> 4 != 4 {
        return 0..n;
    }
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    if ihl < 20 || ihl >= n {
        return 0..n;
    }
    // Only the first fragment carries the transport header.
    let frag_off = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x1fff;
    let l4 = match (pkt[9], frag_off) {
        (_, off) if off != 0 => 0,
        (6, _) if n >= ihl + 13 => usize::from(pkt[ihl + 12] >> 4) * 4,
        (17, _) | (1, _) => 8,
        _ => 0,
    };
    let start = ihl + l4;
    if start < n {
        start..n
    } else {
        ihl..n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0, 198, 18, 0, 1];
        p.extend_from_slice(&[198, 18, 0, 2]);
        p.extend_from_slice(l4);
        p
    }

    #[test]
    fn dst_and_ranges() {
        let udp = ipv4(17, &[0u8; 8 + 5]);
        assert_eq!(ipv4_dst(&udp), Some(Ipv4Addr::new(198, 18, 0, 2)));
        assert_eq!(corruptible_range(&udp), 28..33);
        let mut tcp_hdr = vec![0u8; 32 + 10];
        tcp_hdr[12] = 8 << 4;
        let tcp = ipv4(6, &tcp_hdr);
        assert_eq!(corruptible_range(&tcp), 52..62);
        let ack = ipv4(6, &{
            let mut h = vec![0u8; 20];
            h[12] = 5 << 4;
            h
        });
        assert_eq!(corruptible_range(&ack), 20..40);
        assert_eq!(ipv4_dst(&[0x60; 40]), None);
    }
}
