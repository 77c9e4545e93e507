use super::*;

const MS: Nanos = 1_000_000;

fn link(spec: &str, seed: u64) -> Link {
    Link::new(Profile::parse(spec).unwrap(), seed)
}

fn udp(seq: u32, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len.max(32)];
    p[0] = 0x45;
    p[9] = 17;
    p[16..20].copy_from_slice(&[198, 18, 0, 2]);
    p[28..32].copy_from_slice(&seq.to_be_bytes());
    p
}

fn seq_of(p: &[u8]) -> u32 {
    u32::from_be_bytes([p[28], p[29], p[30], p[31]])
}

/// Sends `n` packets `gap` apart and drains everything.
fn run(l: &mut Link, n: u32, gap: Nanos, len: usize) -> Vec<(Nanos, Vec<u8>)> {
    let mut out = Vec::new();
    for i in 0..n {
        let now = Nanos::from(i) * gap;
        while let Some(x) = l.poll(now) {
            out.push(x);
        }
        l.push(now, udp(i, len));
    }
    while let Some(t) = l.next_due() {
        out.extend(std::iter::from_fn(|| l.poll(t)));
    }
    out
}

#[test]
fn clean_link_is_transparent() {
    let mut l = link("", 1);
    let out = run(&mut l, 100, MS, 100);
    assert_eq!(out.len(), 100);
    for (i, (t, p)) in out.iter().enumerate() {
        assert_eq!(seq_of(p), i as u32);
        assert_eq!(*t, i as Nanos * MS);
        assert_eq!(*p, udp(i as u32, 100));
    }
}

#[test]
fn fixed_delay() {
    let mut l = link("delay 50ms", 1);
    l.push(10, udp(0, 100));
    assert!(l.poll(50 * MS).is_none());
    assert_eq!(l.next_due(), Some(50 * MS + 10));
    assert_eq!(l.poll(50 * MS + 10).map(|x| x.0), Some(50 * MS + 10));
}

#[test]
fn uniform_jitter_stays_in_bounds_and_centred() {
    let mut l = link("delay 100ms 10ms", 2);
    let mut sum = 0.0;
    let n = 20_000;
    for i in 0..n {
        l.push(0, udp(i, 64));
    }
    let mut k = 0;
    while let Some((t, _)) = l.poll(u64::MAX) {
        assert!((90 * MS..=110 * MS).contains(&t), "{t}");
        sum += t as f64;
        k += 1;
    }
    assert_eq!(k, n);
    let mean = sum / f64::from(n) / MS as f64;
    assert!((mean - 100.0).abs() < 0.3, "{mean}");
}

#[test]
fn normal_and_pareto_jitter_have_the_right_spread() {
    for dist in ["normal", "pareto", "paretonormal"] {
        let mut l = link(&format!("delay 100ms 10ms distribution {dist}"), 3);
        let n = 50_000u32;
        for i in 0..n {
            l.push(0, udp(i, 64));
        }
        let xs: Vec<f64> = std::iter::from_fn(|| l.poll(u64::MAX))
            .map(|(t, _)| t as f64 / MS as f64)
            .collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64).sqrt();
        assert!((mean - 100.0).abs() < 1.0, "{dist} mean {mean}");
        assert!((sd - 10.0).abs() < 1.5, "{dist} sd {sd}");
    }
}

#[test]
fn rate_serializes_and_bounds_the_queue() {
    // 1250-byte packets at 10 Mbit/s take 1 ms each.
    let mut l = link("rate 10mbit limit 100", 1);
    for i in 0..150 {
        l.push(0, udp(i, 1250));
    }
    let st = l.stats();
    assert_eq!(st.queue_drops, 50);
    let out: Vec<_> = std::iter::from_fn(|| l.poll(u64::MAX)).collect();
    assert_eq!(out.len(), 100);
    for (i, (t, _)) in out.iter().enumerate() {
        assert_eq!(*t, (i as Nanos + 1) * MS);
    }
    // Paced below the rate, nothing queues or drops.
    let mut l = link("rate 10mbit limit 2", 1);
    let out = run(&mut l, 1000, 2 * MS, 1250);
    assert_eq!(out.len(), 1000);
    assert_eq!(l.stats().queue_drops, 0);
}

#[test]
fn rate_with_jitter_stays_in_order() {
    let mut l = link("rate 100mbit delay 20ms 5ms", 9);
    let out = run(&mut l, 5000, 50_000, 1000);
    let seqs: Vec<u32> = out.iter().map(|(_, p)| seq_of(p)).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn random_loss_rate() {
    let mut l = link("loss 5%", 4);
    let n = 100_000;
    let out = run(&mut l, n, 1000, 64);
    let loss = 1.0 - out.len() as f64 / f64::from(n);
    assert!((loss - 0.05).abs() < 0.003, "{loss}");
    assert_eq!(l.stats().dropped, u64::from(n) - out.len() as u64);
}

fn burst_lengths(out: &[(Nanos, Vec<u8>)], n: u32) -> (f64, f64) {
    let got: std::collections::HashSet<u32> = out.iter().map(|(_, p)| seq_of(p)).collect();
    let (mut bursts, mut lost, mut in_burst) = (0u32, 0u32, false);
    for i in 0..n {
        if got.contains(&i) {
            in_burst = false;
        } else {
            lost += 1;
            if !in_burst {
                bursts += 1;
            }
            in_burst = true;
        }
    }
    (
        f64::from(lost) / f64::from(n),
        f64::from(lost) / f64::from(bursts.max(1)),
    )
}

#[test]
fn correlated_loss_keeps_its_rate_but_bursts() {
    let n = 200_000;
    let mut l = link("loss 10% 75%", 5);
    let out = run(&mut l, n, 1000, 64);
    let (rate, burst) = burst_lengths(&out, n);
    assert!((rate - 0.10).abs() < 0.01, "{rate}");
    assert!(burst > 2.0, "{burst}");
}

#[test]
fn gilbert_elliott_rate_and_bursts() {
    let n = 400_000;
    // p = 1 %, r = 25 %: bad 1/26 of the time, bursts of 1/r = 4 packets.
    let mut l = link("loss gemodel 1% 25% 100% 0%", 6);
    let out = run(&mut l, n, 1000, 64);
    let (rate, burst) = burst_lengths(&out, n);
    let expect = Profile::parse("loss gemodel 1% 25%").unwrap().loss.mean();
    assert!((rate - expect).abs() < 0.004, "{rate} vs {expect}");
    assert!((burst - 4.0).abs() < 0.4, "{burst}");
}

#[test]
fn corruption_flips_exactly_one_payload_bit() {
    let mut l = link("corrupt 10%", 7);
    let n = 20_000;
    let out = run(&mut l, n, 1000, 200);
    assert_eq!(out.len(), n as usize);
    let mut bad = 0;
    // Nothing is lost or reordered, so the i-th packet out is packet i.
    for (i, (_, p)) in out.iter().enumerate() {
        let clean = udp(i as u32, 200);
        let diff: u32 = p
            .iter()
            .zip(&clean)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert!(diff <= 1);
        assert!(p[..28] == clean[..28], "headers are never touched");
        bad += diff;
    }
    assert_eq!(u64::from(bad), l.stats().corrupted);
    let rate = f64::from(bad) / f64::from(n);
    assert!((rate - 0.10).abs() < 0.01, "{rate}");
}

#[test]
fn duplication_rate() {
    let mut l = link("duplicate 2%", 8);
    let n = 100_000;
    let out = run(&mut l, n, 1000, 64);
    let dups = out.len() as f64 - f64::from(n);
    assert!((dups / f64::from(n) - 0.02).abs() < 0.002);
    assert_eq!(dups as u64, l.stats().duplicated);
}

fn early_fraction(out: &[(Nanos, Vec<u8>)]) -> f64 {
    // A packet is early when it arrives before a packet sent before it.
    let seqs: Vec<u32> = out.iter().map(|(_, p)| seq_of(p)).collect();
    let mut arrival = vec![usize::MAX; seqs.iter().max().map_or(0, |m| *m as usize + 1)];
    for (i, s) in seqs.iter().enumerate() {
        arrival[*s as usize] = i;
    }
    let (mut early, mut max_before) = (0, 0usize);
    for (i, &a) in arrival.iter().enumerate() {
        if i > 0 && a < max_before {
            early += 1;
        }
        max_before = max_before.max(a);
    }
    f64::from(early) / seqs.len() as f64
}

#[test]
fn reorder_with_netem_meaning() {
    let n = 50_000;
    let mut l = link("delay 10ms reorder 10%", 9);
    let out = run(&mut l, n, MS / 2, 64);
    let f = early_fraction(&out);
    assert!((f - 0.10).abs() < 0.01, "{f}");
    assert_eq!(out.len(), n as usize);
    // gap 5: only every 5th packet may jump.
    let mut l = link("delay 10ms reorder 100% gap 5", 9);
    let out = run(&mut l, 1000, MS / 2, 64);
    assert_eq!(l.stats().reordered, 200);
    assert!((early_fraction(&out) - 0.2).abs() < 0.01);
    // Correlation keeps the mean.
    let mut l = link("delay 10ms reorder 10% 50%", 9);
    run(&mut l, n, MS / 2, 64);
    let r = l.stats().reordered as f64 / f64::from(n);
    assert!((r - 0.10).abs() < 0.01, "{r}");
}

#[test]
fn link_down_drops_and_up_restores() {
    let mut l = link("delay 10ms", 1);
    l.push(0, udp(0, 64));
    l.set_up(false);
    l.push(1, udp(1, 64));
    assert!(l.poll(u64::MAX).is_none());
    assert_eq!(l.stats().down_drops, 2);
    l.set_up(true);
    l.push(2, udp(2, 64));
    assert_eq!(l.poll(u64::MAX).map(|(_, p)| seq_of(&p)), Some(2));
}

#[test]
fn same_seed_same_run() {
    let spec = "rate 50mbit delay 20ms 5ms loss 3% corrupt 2% duplicate 2% reorder 5%";
    let a = run(&mut link(spec, 42), 5000, 100_000, 500);
    let b = run(&mut link(spec, 42), 5000, 100_000, 500);
    let c = run(&mut link(spec, 43), 5000, 100_000, 500);
    assert!(a == b);
    assert!(a != c);
}

#[test]
fn correlated_reorder_keeps_its_mean_over_seeds() {
    let mut total = 0.0;
    for seed in 0..20 {
        let mut l = link("delay 10ms reorder 25% 50%", seed);
        run(&mut l, 10_000, MS / 5, 64);
        total += l.stats().reordered as f64 / 10_000.0;
    }
    let mean = total / 20.0;
    assert!((mean - 0.25).abs() < 0.005, "{mean}");
}
