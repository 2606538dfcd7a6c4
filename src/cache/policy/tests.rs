use super::*;
use proptest::prelude::*;

fn all(handles: u32, capacity: u64) -> Vec<(&'static str, Box<dyn Policy>)> {
    vec![
        ("lru", Box::new(Lru::new(handles))),
        ("sieve", Box::new(Sieve::new(handles))),
        ("s3fifo", Box::new(S3Fifo::new(handles, capacity))),
    ]
}

#[test]
fn lru_evicts_the_least_recently_used() {
    let mut p = Lru::new(8);
    for h in 0..4 {
        p.insert(h, 10, u64::from(h));
    }
    p.hit(0);
    assert_eq!(p.evict(&mut |_| Probe::default()), Some(1));
    assert_eq!(p.evict(&mut |_| Probe::default()), Some(2));
    assert_eq!(p.evict(&mut |_| Probe::default()), Some(3));
    assert_eq!(p.evict(&mut |_| Probe::default()), Some(0));
    assert_eq!(p.evict(&mut |_| Probe::default()), None);
}

#[test]
fn sieve_spares_visited_objects_in_place() {
    let mut p = Sieve::new(8);
    for h in 0..4 {
        p.insert(h, 10, u64::from(h));
    }
    p.hit(0);
    p.hit(2);
    assert_eq!(p.evict(&mut |_| Probe::default()), Some(1));
    assert_eq!(p.evict(&mut |_| Probe::default()), Some(3));
    // The hand wrapped: 0 and 2 were cleared on the way.
    assert_eq!(p.evict(&mut |_| Probe::default()), Some(0));
}

#[test]
fn s3fifo_drops_one_hit_wonders_before_objects_used_again() {
    // Capacity 100: small queue 10 bytes, one object.
    let mut p = S3Fifo::new(16, 100);
    p.insert(0, 10, 100);
    p.hit(0);
    p.hit(0);
    for h in 1..5 {
        p.insert(h, 10, 100 + u64::from(h));
    }
    // 0 was used twice while small: it moves to main; 1..4 are never used.
    let victims: Vec<u32> = (0..4)
        .filter_map(|_| p.evict(&mut |_| Probe::default()))
        .collect();
    assert_eq!(victims, vec![1, 2, 3, 4]);
    assert!(p.in_main(0));
    assert_eq!(p.ghost_len(), 4);
}

#[test]
fn s3fifo_admits_a_ghost_straight_into_main() {
    let mut p = S3Fifo::new(16, 100);
    p.insert(3, 10, 777);
    p.insert(4, 10, 778);
    assert_eq!(p.evict(&mut |_| Probe::default()), Some(3));
    // The same object comes back under another handle.
    p.insert(9, 10, 777);
    assert!(p.in_main(9));
    p.insert(10, 10, 999);
    assert!(!p.in_main(10));
}

#[test]
fn section_3_2_kept_objects_are_never_evicted() {
    for (name, mut p) in all(16, 1000) {
        for h in 0..8 {
            p.insert(h, 10, u64::from(h));
        }
        let mut victims = vec![];
        while let Some(v) = p.evict(&mut |h| Probe::keep(h % 2 == 0)) {
            victims.push(v);
        }
        victims.sort();
        assert_eq!(victims, vec![1, 3, 5, 7], "{name}");
        assert_eq!(p.len(), 4, "{name}");
        assert_eq!(p.evict(&mut |_| Probe::keep(true)), None, "{name}");
    }
}

#[test]
fn hits_counted_elsewhere_save_an_object_as_local_hits_do() {
    let mut p = S3Fifo::new(16, 100);
    p.insert(0, 10, 100);
    p.insert(1, 10, 101);
    // Object 0 was read twice on other cores: the probe reports it.
    let v = p.evict(&mut |h| Probe {
        hits: if h == 0 { 2 } else { 0 },
        keep: false,
    });
    assert_eq!(v, Some(1));
    assert!(p.in_main(0));
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u32, u16),
    Hit(u32),
    Remove(u32),
    Evict(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..24, 1u16..500).prop_map(|(h, s)| Op::Insert(h, s)),
        (0u32..24).prop_map(Op::Hit),
        (0u32..24).prop_map(Op::Remove),
        any::<u8>().prop_map(Op::Evict),
    ]
}

proptest! {
    /// Every policy agrees with a set model on what is cached and how many
    /// bytes, evicts only cached objects the predicate does not keep, and
    /// returns None only when every cached object is kept.
    #[test]
    fn policies_agree_with_a_set_model(ops in proptest::collection::vec(op(), 0..300)) {
        for (name, mut p) in all(24, 2000) {
            let mut model: std::collections::BTreeMap<u32, u64> = Default::default();
            for op in &ops {
                match *op {
                    Op::Insert(h, s) => {
                        model.entry(h).or_insert(u64::from(s));
                        p.insert(h, u64::from(s), u64::from(h));
                    }
                    Op::Hit(h) => p.hit(h),
                    Op::Remove(h) => {
                        prop_assert_eq!(p.remove(h), model.remove(&h).is_some(), "{}", name);
                    }
                    Op::Evict(mask) => {
                        let keep = |h: u32| (mask >> (h % 8)) & 1 == 1;
                        match p.evict(&mut |h| Probe::keep(keep(h))) {
                            Some(v) => {
                                prop_assert!(model.remove(&v).is_some(), "{} evicted absent {}", name, v);
                                prop_assert!(!keep(v), "{} evicted kept {}", name, v);
                            }
                            None => prop_assert!(model.keys().all(|&h| keep(h)), "{} gave up", name),
                        }
                    }
                }
                prop_assert_eq!(p.len(), model.len(), "{}", name);
                prop_assert_eq!(p.bytes(), model.values().sum::<u64>(), "{}", name);
                for h in 0..24 {
                    prop_assert_eq!(p.contains(h), model.contains_key(&h), "{}", name);
                }
            }
        }
    }

    /// LRU's victim order is exactly recency order.
    #[test]
    fn lru_matches_a_recency_list(ops in proptest::collection::vec(op(), 0..200)) {
        let mut p = Lru::new(24);
        let mut order: VecDeque<u32> = VecDeque::new(); // front = least recent
        for op in &ops {
            match *op {
                Op::Insert(h, s) => {
                    if !order.contains(&h) { order.push_back(h); }
                    p.insert(h, u64::from(s), 0);
                }
                Op::Hit(h) => {
                    if let Some(i) = order.iter().position(|&x| x == h) {
                        order.remove(i);
                        order.push_back(h);
                    }
                    p.hit(h);
                }
                Op::Remove(h) => {
                    if let Some(i) = order.iter().position(|&x| x == h) { order.remove(i); }
                    p.remove(h);
                }
                Op::Evict(_) => prop_assert_eq!(p.evict(&mut |_| Probe::default()), order.pop_front()),
            }
        }
    }
}
