//! The cluster view's judgement of records, twins and strangers, without I/O.

use super::*;

fn terms() -> Terms {
    Terms::new(3, 2, 30_000, 0.01, "")
}

fn members() -> Vec<String> {
    let mut m: Vec<String> = (0..3).map(|_| new_id()).collect();
    m.sort();
    m
}

fn view() -> View {
    View::new(terms(), vec!["a".into(), "b".into(), "c".into()])
}

#[test]
fn a_record_round_trips_through_its_fields() {
    let members = members();
    let mut record = Record::new("c1", &members[1], &members, &terms());
    record.addresses = members
        .iter()
        .enumerate()
        .map(|(i, m)| (m.clone(), format!("redis://h{i}:6379")))
        .collect();
    let mut fields: HashMap<String, String> = record
        .fields()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    assert_eq!(Record::parse(&fields), Ok(Some(record.clone())));
    assert_eq!(Record::parse(&HashMap::new()), Ok(None));
    // The key also holds the master's data epoch, which is no field of the record: alone it
    // is no record, beside one it changes nothing.
    let epoch = (EPOCH_FIELD.to_owned(), "e1:1700000000000000".to_owned());
    assert_eq!(Record::parse(&HashMap::from([epoch.clone()])), Ok(None));
    fields.extend([epoch]);
    assert_eq!(Record::parse(&fields), Ok(Some(record)));
}

#[test]
fn every_term_changes_the_fingerprint() {
    let members = members();
    let base = terms().fingerprint("c1", &members);
    let others = [
        Terms::new(4, 2, 30_000, 0.01, ""),
        Terms::new(3, 3, 30_000, 0.01, ""),
        Terms::new(3, 2, 30_001, 0.01, ""),
        Terms::new(3, 2, 30_000, 0.02, ""),
        Terms::new(3, 2, 30_000, 0.01, "x:"),
    ];
    for other in others {
        assert_ne!(other.fingerprint("c1", &members), base, "{other}");
    }
    assert_ne!(terms().fingerprint("c2", &members), base);
    assert_ne!(terms().fingerprint("c1", &members[..2]), base);
    assert_eq!(terms().fingerprint("c1", &members), base);
}

#[test]
fn a_record_with_other_terms_is_refused_naming_the_difference() {
    let members = members();
    let theirs = Terms::new(3, 2, 60_000, 0.01, "");
    let record = Record::new("c1", &members[0], &members, &theirs);
    let view = view();
    let Admission::Mismatch(why) = view.connected(0, Some("r0"), Some(&record)) else {
        panic!("admitted a record with another ttl_max");
    };
    assert!(why.contains("ttl_max_ms \"60000\""), "{why}");
    assert_eq!(view.fingerprint(), "");
}

#[test]
fn an_agreeing_record_is_adopted_and_a_twin_refused() {
    let members = members();
    let view = view();
    let record = Record::new("c1", &members[0], &members, &terms());
    assert_eq!(
        view.connected(0, Some("r0"), Some(&record)),
        Admission::Member
    );
    assert_eq!(view.fingerprint(), record.fingerprint);
    // Another address that reaches the same server.
    let twin = view.connected(1, Some("r0"), Some(&record));
    assert!(matches!(twin, Admission::Mismatch(_)), "{twin:?}");
    assert!(view.refused(0).is_some());
    // Another server that carries the same member id (a copy of its data).
    let view = self::view();
    assert_eq!(
        view.connected(0, Some("r0"), Some(&record)),
        Admission::Member
    );
    let copy = view.connected(2, Some("r9"), Some(&record));
    assert!(matches!(copy, Admission::Stranger(_)), "{copy:?}");
    assert_eq!(
        view.refused(0).map(|e| e.kind()),
        Some(MasterErrorKind::Misconfigured)
    );
    // Reading either again (before each request) finds the other: still refused.
    for i in [0, 2, 0] {
        let again = view.connected(i, Some(["r0", "", "r9"][i]), Some(&record));
        assert!(matches!(again, Admission::Stranger(_)), "{i}: {again:?}");
    }
    assert!(view.refused(0).is_some() && view.refused(2).is_some());
}

#[test]
fn a_known_member_without_its_record_is_readmitted_a_stranger_refused() {
    let members = members();
    let view = view();
    for i in 0..2 {
        let record = Record::new("c1", &members[i], &members, &terms());
        assert_eq!(
            view.connected(i, Some(&format!("r{i}")), Some(&record)),
            Admission::Member
        );
    }
    // Master 1 lost its data: this client knows its id.
    match view.connected(1, Some("r1b"), None) {
        Admission::Readmit { record } => {
            assert_eq!(record.master, members[1]);
            assert!(record.counters_lost);
            assert_eq!(record.fingerprint, view.fingerprint());
        }
        other => panic!("{other:?}"),
    }
    // Master 2 was never seen with a record: it cannot be told from a stranger.
    assert!(matches!(
        view.connected(2, Some("r2"), None),
        Admission::Stranger(_)
    ));
}

#[test]
fn a_master_met_without_a_record_is_disowned_once_the_cluster_is_known() {
    let members = members();
    let view = view();
    // Master 2 answers first, without a record: nothing is known of a cluster yet.
    assert_eq!(view.connected(2, Some("r2"), None), Admission::Member);
    assert!(!view.stale(2) && view.disowned(2).is_none());
    // Master 0 shows the record: master 2's standing must be read again, and what it
    // granted meanwhile does not count.
    let record = Record::new("c1", &members[0], &members, &terms());
    assert_eq!(
        view.connected(0, Some("r0"), Some(&record)),
        Admission::Member
    );
    assert!(view.stale(2));
    let why = view.disowned(2).unwrap();
    assert_eq!(why.kind(), MasterErrorKind::Other);
    assert!(!view.stale(0) && view.disowned(0).is_none());
    // Read again: without a record it is a stranger, with one a member.
    assert!(matches!(
        view.connected(2, Some("r2"), None),
        Admission::Stranger(_)
    ));
    assert!(!view.stale(2));
    assert_eq!(
        view.disowned(2).map(|e| e.kind()),
        Some(MasterErrorKind::Misconfigured)
    );
    let again = Record::new("c1", &members[2], &members, &terms());
    assert_eq!(
        view.connected(2, Some("r2"), Some(&again)),
        Admission::Member
    );
    assert!(view.disowned(2).is_none());
}

#[test]
fn records_of_two_clusters_are_refused() {
    let view = view();
    let ours = members();
    let theirs = members();
    let a = Record::new("c1", &ours[0], &ours, &terms());
    let b = Record::new("c2", &theirs[1], &theirs, &terms());
    assert_eq!(view.connected(0, Some("r0"), Some(&a)), Admission::Member);
    assert!(matches!(
        view.connected(1, Some("r1"), Some(&b)),
        Admission::Mismatch(_)
    ));
}
