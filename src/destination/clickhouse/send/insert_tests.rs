use super::inserts;

#[test]
fn pieces_join_into_inserts_within_the_size_and_about_half_the_total() {
    let mb = 1u64 << 20;
    // 75 MiB held in pieces of 8 MiB, inserts of at most 64 MiB: two
    // senders get about half each, never over the size.
    let bounds: Vec<u64> = (1..=9).map(|i| i * 8 * mb).chain([75 * mb]).collect();
    let parts = inserts(&bounds, 64 * mb, 2);
    assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), 75 * mb);
    assert!(parts.iter().all(|p| p.1 <= 64 * mb), "{parts:?}");
    assert!(parts.iter().all(|p| p.1 <= 40 * mb), "{parts:?}");
    assert!(
        parts.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0),
        "{parts:?}"
    );
    // Tiny inserts (max_insert_bytes=64): one per piece, as before.
    let bounds = [70u64, 140, 210, 230];
    assert_eq!(
        inserts(&bounds, 64, 2),
        vec![(0, 70), (70, 70), (140, 70), (210, 20)]
    );
    assert_eq!(inserts(&[100], 64, 2), vec![(0, 100)]);
    // One sender (a cluster): inserts as large as allowed.
    let bounds: Vec<u64> = (1..=9).map(|i| i * 8 * mb).chain([75 * mb]).collect();
    assert_eq!(
        inserts(&bounds, 64 * mb, 1),
        vec![(0, 64 * mb), (64 * mb, 11 * mb)]
    );
}
