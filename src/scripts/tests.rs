//! The codecs without a server: what each op sends, and how each answer reads. The
//! scripts themselves run on a real server in `tests/scripts.rs`, through the master in
//! the differential test (`sim/tests/differential.rs`).

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use super::*;
use crate::cluster::Owner;
use crate::error::MasterErrorKind;
use crate::op::{EpochReport, FenceRead, Op, Reply};

const MS: Duration = Duration::from_millis(1);

/// The view of a new client with the key prefix `app:`, for as long as the tests run.
fn new_view() -> &'static View {
    let terms = crate::cluster::Terms::new(3, 2, 100, 0.01, "app:");
    Box::leak(Box::new(View::new(terms, Vec::new())))
}

fn context() -> Context<'static> {
    Context {
        record_key: "app:redquorum:cluster",
        view: new_view(),
        fingerprint: "fp",
        epoch_id: "e1",
        hold: true,
    }
}

fn owner() -> Arc<Owner> {
    Arc::new(Owner {
        client: "c1".into(),
        host: "h".into(),
        pid: 7,
        label: "l".into(),
        tag: "c1".into(),
    })
}

fn acquire(fence: FenceRead) -> Op {
    Op::AcquireChecked {
        key: "k".into(),
        value: "v".into(),
        ttl: 100 * MS,
        fence,
        owner: owner(),
    }
}

/// The request of `op` in `ctx`.
fn encode(op: &Op, ctx: &Context<'_>) -> Request {
    match codec(op) {
        Some(codec) => codec.encode(op, ctx).unwrap(),
        None => panic!("no codec for {op:?}"),
    }
}

/// The script invocation of `op` in `ctx`.
fn invocation(op: &Op, ctx: &Context<'_>) -> Invocation {
    match encode(op, ctx) {
        Request::Script(call) => call,
        other => panic!("not a script: {other:?}"),
    }
}

/// The reply to `op` that `value` gives.
fn decode(op: &Op, value: Value) -> Result<Reply, MasterError> {
    match codec(op) {
        Some(codec) => codec.decode(op, value),
        None => panic!("no codec for {op:?}"),
    }
}

fn text(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

#[test]
fn an_acquire_sends_its_keys_and_arguments_in_the_script_s_order() {
    let call = invocation(&acquire(FenceRead::Read), &context());
    assert_eq!(
        call.script.get_hash(),
        Script::new(sources::ACQUIRE_LUA).get_hash()
    );
    assert!(call.checks_record);
    // The preamble's slots first, as in every lock script, then the script's own.
    assert_eq!(
        call.keys,
        [
            "app:redquorum:cluster",
            "k",
            "redquorum:fence:k",
            "redquorum:owner:k",
            "redquorum:ticket:k",
            // The holder record its value names ("v", without a dot, is its own tag).
            "app:redquorum:holder:v",
        ]
    );
    assert_eq!(
        call.args,
        ["e1", "fp", "v", "100", "1", "c1", "h", "7", "l"]
    );
    let skip = invocation(&acquire(FenceRead::Skip), &context());
    assert_eq!(skip.args[4], "0");
    // Where the holder record is known to outlive the lock, its fields go empty: the
    // script leaves the record alone.
    let known = Context {
        hold: false,
        ..context()
    };
    assert_eq!(
        invocation(&acquire(FenceRead::Read), &known).args,
        ["e1", "fp", "v", "100", "1", "", "", "", ""]
    );
}

/// The arguments of `cmd` as text.
fn args_of(cmd: &redis::Cmd) -> Vec<String> {
    cmd.args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            _ => "<not an argument>".to_owned(),
        })
        .collect()
}

/// A round's request is built once; where it carries an id for a data epoch (`ARGV[1]`),
/// each master's `EVALSHA` has its own, and the rest is the same bytes (docs/design.md §2).
#[test]
fn each_master_gets_its_own_epoch_id_and_the_rest_is_shared() {
    let call = invocation(&acquire(FenceRead::Skip), &context());
    assert!(call.starts_epochs());
    let (a, b) = (
        args_of(&call.evalsha("id-a")),
        args_of(&call.evalsha("id-b")),
    );
    let first_arg = 3 + call.keys.len();
    assert_eq!(a[..first_arg], b[..first_arg]);
    assert_eq!((&*a[first_arg], &*b[first_arg]), ("id-a", "id-b"));
    assert_eq!(a[first_arg + 1..], call.args[1..]);
    assert_eq!(a[first_arg + 1..], b[first_arg + 1..]);
    // A release starts no epoch: its arguments go as they are.
    let release = Op::Release {
        key: "k".into(),
        value: "v".into(),
        channel: "c".into(),
        plain: true,
    };
    let call = invocation(&release, &context());
    assert!(!call.starts_epochs());
    assert_eq!(
        args_of(&call.evalsha("id-a"))[3 + call.keys.len()..],
        call.args[..]
    );
}

#[test]
fn an_extension_reads_the_epoch_only_when_asked() {
    let extend = |epoch: bool| Op::Extend {
        key: "k".into(),
        value: "v".into(),
        ttl: Duration::from_micros(10),
        epoch,
    };
    let with = invocation(&extend(true), &context());
    let without = invocation(&extend(false), &context());
    // A TTL below a millisecond is sent as 1 ms (`PX 0` is an error).
    assert_eq!(with.args, ["e1", "fp", "v", "1"]);
    assert_eq!(without.args, ["", "fp", "v", "1"]);
    // The holder record its value names, and the key's owner record (a writer's or a
    // permit's, which lives as long as the key).
    assert_eq!(
        with.keys,
        [
            "app:redquorum:cluster",
            "k",
            "app:redquorum:holder:v",
            "redquorum:owner:k",
        ]
    );
}

#[test]
fn a_release_and_the_bootstrap_claim_check_no_fingerprint() {
    let release = Op::Release {
        key: "k".into(),
        value: "v".into(),
        channel: "redquorum:released:k".into(),
        plain: false,
    };
    let call = invocation(&release, &context());
    assert!(!call.checks_record);
    assert_eq!(
        call.keys,
        [
            "k",
            "redquorum:queue:k",
            "redquorum:owner:k",
            "redquorum:ticket:k"
        ]
    );
    assert_eq!(
        call.args,
        ["v", "redquorum:released:k", "redquorum:waiter:k:", "0"]
    );
    // A plain lock's lease value says so: it has no owner record and is no waiter's id.
    let plain = Op::Release {
        key: "k".into(),
        value: "v".into(),
        channel: "redquorum:released:k".into(),
        plain: true,
    };
    assert_eq!(invocation(&plain, &context()).args[3], "1");
    // A release answers -2 never, but a value that looked like the refusal is a reply
    // (here, one the protocol does not define), not a changed record.
    let request = encode(&release, &context());
    assert!(!request.record_differs(&Value::Array(vec![Value::Int(-2)])));
    let claim = Op::Claim {
        token: "t".into(),
        ttl: 5 * MS,
    };
    let Request::Command(set) = encode(&claim, &context()) else {
        panic!("the claim is a plain SET");
    };
    let args: Vec<&[u8]> = set
        .args_iter()
        .filter_map(|a| match a {
            redis::Arg::Simple(a) => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(
        args,
        [&b"SET"[..], b"app:redquorum:init", b"t", b"NX", b"PX", b"5"]
    );
}

/// Every lock script starts with the preamble, and takes its slots alike: the epoch record
/// and the cluster record first, then an epoch id and the caller's fingerprint.
#[test]
fn every_script_with_the_preamble_takes_its_slots_first() {
    let ctx = context();
    let owner = owner();
    let ops = [
        acquire(FenceRead::Skip),
        Op::AcquireQueued {
            key: "k".into(),
            value: "v".into(),
            ttl: 100 * MS,
            fence: FenceRead::Skip,
            owner: Arc::clone(&owner),
            waiter: "w".into(),
            fair: true,
        },
        Op::Enqueue {
            key: "k".into(),
            waiter: "w".into(),
            score: 3,
            strict: false,
            fair: false,
            waiter_ttl: 100 * MS,
            channel: "c".into(),
        },
        Op::AcquireMany {
            keys: vec!["a".into(), "b".into()],
            value: "v".into(),
            ttl: 100 * MS,
            fence: FenceRead::Skip,
            owner: Arc::clone(&owner),
        },
        Op::ExtendMany {
            keys: vec!["a".into(), "b".into()],
            value: "v".into(),
            ttl: 100 * MS,
            epoch: true,
        },
        Op::RwAcquire {
            key: "k".into(),
            value: "v".into(),
            ttl: 100 * MS,
            fence: FenceRead::Skip,
            owner: Arc::clone(&owner),
            mode: crate::op::RwMode::Read,
        },
        Op::ExtendRead {
            key: "r".into(),
            lock: "k".into(),
            value: "v".into(),
            ttl: 100 * MS,
            epoch: true,
        },
        Op::RwDowngrade {
            key: "k".into(),
            value: "v".into(),
        },
        Op::AcquirePermits(Box::new(crate::op::PermitsOp {
            limit_key: "s:limit".into(),
            slots: vec!["s:0".into()].into(),
            base: "s:".into(),
            wanted: vec![0],
            replace: false,
            value: "v".into(),
            ttl: 100 * MS,
            fence: false,
            owner,
        })),
    ];
    for op in &ops {
        let call = invocation(op, &ctx);
        assert!(call.checks_record, "{}", op.name());
        assert_eq!(call.keys[..1], ["app:redquorum:cluster"], "{}", op.name());
        assert_eq!(call.args[..2], ["e1", "fp"], "{}", op.name());
    }
}

#[test]
fn the_fingerprint_refusal_is_recognised_only_where_the_script_checks_it() {
    let request = encode(&acquire(FenceRead::Skip), &context());
    let refused = Value::Array(vec![Value::Int(-2), text("e:1"), text("other")]);
    assert!(request.record_differs(&refused));
    let held = Value::Array(vec![Value::Int(0), text("e:1"), Value::Nil]);
    assert!(!request.record_differs(&held));
    assert!(!request.record_differs(&Value::Int(-2)));
}

#[test]
fn an_acquire_s_answer_reads_as_a_checked_reply() {
    let op = acquire(FenceRead::Read);
    let granted = |fence: Option<u64>| Reply::Checked {
        granted: true,
        epoch: EpochReport {
            record: Some("e:5".into()),
        },
        fence,
        holder_ttl: None,
        ticket: None,
    };
    // A grant of `acquire.lua` answers short; `acquire_queued.lua`'s, in full.
    let full = Value::Array(vec![
        Value::Int(1),
        text("e:5"),
        text("7"),
        Value::Int(-3),
        Value::Nil,
        Value::Nil,
    ]);
    assert_eq!(decode(&op, full).unwrap(), granted(Some(7)));
    let fenced = Value::Array(vec![Value::Int(1), text("e:5"), text("7")]);
    assert_eq!(decode(&op, fenced).unwrap(), granted(Some(7)));
    let short = Value::Array(vec![Value::Int(1), text("e:5")]);
    assert_eq!(decode(&op, short).unwrap(), granted(None));
    let held = Value::Array(vec![
        Value::Int(0),
        text("e:5"),
        Value::Nil,
        Value::Int(40),
        Value::Nil,
        text("3"),
    ]);
    assert!(matches!(
        decode(&op, held).unwrap(),
        Reply::Checked {
            granted: false,
            holder_ttl: Some(ttl),
            ticket: Some(3),
            ..
        } if ttl == 40 * MS
    ));
}

#[test]
fn answers_the_protocol_does_not_define_are_errors_not_panics() {
    let op = acquire(FenceRead::Skip);
    let answer = |code: i64, fence: &str, detail: Value| {
        Value::Array(vec![
            Value::Int(code),
            text("e:5"),
            text(fence),
            Value::Int(-3),
            detail,
            Value::Nil,
        ])
    };
    let kind = |r: Result<Reply, MasterError>| r.map_err(|e| e.kind());
    assert_eq!(
        kind(decode(&op, answer(-3, "1", text("hash")))),
        Err(MasterErrorKind::WrongKind)
    );
    assert_eq!(
        kind(decode(&op, answer(9, "1", Value::Nil))),
        Err(MasterErrorKind::Protocol)
    );
    assert_eq!(
        kind(decode(&op, answer(1, "soon", Value::Nil))),
        Err(MasterErrorKind::Protocol)
    );
    assert!(decode(&op, Value::Int(1)).is_err(), "not a table");
    assert!(decode(&op, Value::Array(Vec::new())).is_err(), "too short");
    // Only a grant answers short.
    for code in [0, -3, 9] {
        let short = Value::Array(vec![Value::Int(code), text("e:5")]);
        assert_eq!(
            kind(decode(&op, short)),
            Err(MasterErrorKind::Protocol),
            "{code}"
        );
    }
}

#[test]
fn a_codec_given_another_family_s_op_says_so() {
    let acquire = acquire(FenceRead::Skip);
    let release = Op::Release {
        key: "k".into(),
        value: "v".into(),
        channel: "c".into(),
        plain: false,
    };
    let Some(queue) = codec(&Op::Dequeue {
        key: "k".into(),
        waiter: "w".into(),
        channel: "c".into(),
    }) else {
        panic!("the dequeue has a codec");
    };
    for op in [&acquire, &release] {
        let error = queue.encode(op, &context()).unwrap_err();
        assert_eq!(error.kind(), MasterErrorKind::Other);
        assert!(queue.decode(op, Value::Int(1)).is_err());
    }
    assert!(codec(&Op::Survey).is_none());
    assert!(
        codec(&Op::Scan {
            cursor: 0,
            rw: false
        })
        .is_none()
    );
}

#[test]
fn a_several_key_acquire_names_the_key_of_another_kind() {
    let op = Op::AcquireMany {
        keys: vec!["a".into(), "b".into()],
        value: "v".into(),
        ttl: 100 * MS,
        fence: FenceRead::Skip,
        owner: owner(),
    };
    let call = invocation(&op, &context());
    assert_eq!(
        call.keys,
        [
            "app:redquorum:cluster",
            "app:redquorum:holder:v",
            "a",
            "redquorum:fence:a",
            "redquorum:owner:a",
            "b",
            "redquorum:fence:b",
            "redquorum:owner:b",
        ]
    );
    let other_kind = Value::Array(vec![
        Value::Int(-3),
        text("e:5"),
        Value::Array(Vec::new()),
        Value::Array(vec![Value::Int(2)]),
        text("hash"),
    ]);
    let error = decode(&op, other_kind).unwrap_err();
    assert_eq!(error.kind(), MasterErrorKind::WrongKind);
    assert!(error.to_string().contains("\"b\""), "{error}");
}

#[cfg(redquorum_mutants)]
mod planted {
    use super::*;

    /// The context of a new client with `mutant` planted.
    fn planting(mutant: Mutant) -> Context<'static> {
        let ctx = context();
        crate::mutants::plant(ctx.view.client(), mutant);
        ctx
    }

    #[test]
    fn the_codec_sends_the_planted_script_only_where_the_client_plants_it() {
        let product = invocation(&acquire(FenceRead::Read), &context());
        let token = invocation(&acquire(FenceRead::Read), &planting(Mutant::OneRoundToken));
        assert_ne!(token.script.get_hash(), product.script.get_hash());
        assert_eq!((token.keys, token.args), (product.keys, product.args));
        // Without a fence read, the one-round token has nothing to count.
        let skip = invocation(&acquire(FenceRead::Skip), &planting(Mutant::OneRoundToken));
        assert_eq!(skip.script.get_hash(), product.script.get_hash());
        // Another client's bug leaves this script alone.
        let other = invocation(&acquire(FenceRead::Read), &planting(Mutant::HalfQuorum));
        assert_eq!(other.script.get_hash(), product.script.get_hash());
    }

    /// A master loads the planted scripts that its client may send, and no others: a
    /// client that plants no script bug loads the product's alone.
    #[test]
    fn a_master_loads_only_the_planted_scripts_its_client_sends() {
        let loaded = |mutant: Option<Mutant>| {
            planted_scripts(&Planted {
                mutant,
                ..Planted::default()
            })
            .len()
        };
        assert_eq!(loaded(None), 0);
        assert_eq!(loaded(Some(Mutant::HalfQuorum)), 0);
        assert_eq!(loaded(Some(Mutant::HandoffIgnoresLiveness)), 4);
        for mutant in [
            Mutant::OneRoundToken,
            Mutant::ExtendRecreates,
            Mutant::ReentryCounter,
            Mutant::SemaphoreCountPerMaster,
            Mutant::FairByArrival,
        ] {
            assert_eq!(loaded(Some(mutant)), 1, "{mutant:?}");
        }
        // What a codec sends for a planted bug is among what its master loads.
        let ctx = planting(Mutant::OneRoundToken);
        let sent = invocation(&acquire(FenceRead::Read), &ctx);
        let hashes: Vec<String> = planted_scripts(&ctx.planted())
            .iter()
            .map(|source| Script::new(source).get_hash().to_owned())
            .collect();
        assert_eq!(hashes, [sent.script.get_hash()]);
    }

    #[test]
    fn a_plain_del_release_is_a_del_read_as_a_release() {
        let release = Op::Release {
            key: "k".into(),
            value: "v".into(),
            channel: "c".into(),
            plain: false,
        };
        let ctx = planting(Mutant::PlainDelRelease);
        let Request::Command(del) = encode(&release, &ctx) else {
            panic!("not a plain command");
        };
        assert_eq!(del.args_iter().count(), 2);
        assert_eq!(decode(&release, Value::Int(1)).unwrap(), Reply::Granted);
        assert_eq!(decode(&release, Value::Int(0)).unwrap(), Reply::Missing);
    }

    #[test]
    fn the_counted_semaphore_names_its_permits_by_holder() {
        let op = Op::AcquirePermits(Box::new(crate::op::PermitsOp {
            limit_key: "s:limit".into(),
            slots: vec!["s:0".into(), "s:1".into()].into(),
            base: "s:".into(),
            wanted: vec![0, 1],
            replace: false,
            value: "v".into(),
            ttl: 100 * MS,
            fence: false,
            owner: owner(),
        }));
        let call = invocation(&op, &planting(Mutant::SemaphoreCountPerMaster));
        assert_eq!(call.keys, ["app:redquorum:cluster", "s:c:v:0", "s:c:v:1"]);
        assert_eq!(call.args.last().map(String::as_str), Some("s:c:*"));
    }
}
