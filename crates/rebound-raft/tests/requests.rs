//! Requests the application refuses, through a one-node cluster: each is
//! answered with a typed error, applies nothing, and the state machine
//! goes on applying.

mod support;

use rebound_raft::{KvError, KvOp, KvRequest, OpResult, MAX_KEY_LEN, MAX_OPS, MAX_VALUE_LEN};
use support::cluster::{test_config, Cluster};

fn put(key: &str, value: &[u8]) -> KvOp {
    KvOp::Put {
        key: key.into(),
        value: value.to_vec(),
    }
}

fn get(key: &str) -> KvOp {
    KvOp::Get { key: key.into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_are_answered_and_the_state_machine_goes_on() {
    let cluster = Cluster::start(1, test_config()).await;
    let (_, leader) = cluster.router.wait_for_leader().await;
    let refusals = [
        (
            KvRequest::put(vec![b'k'; MAX_KEY_LEN + 1], "v"),
            KvError::KeyLength {
                len: MAX_KEY_LEN + 1,
                max: MAX_KEY_LEN,
            },
        ),
        (KvRequest { ops: vec![] }, KvError::EmptyRequest),
        (
            KvRequest {
                ops: vec![put("a", b"1"), put("b", &[0; MAX_VALUE_LEN + 1])],
            },
            KvError::ValueTooLarge {
                len: MAX_VALUE_LEN + 1,
                max: MAX_VALUE_LEN,
            },
        ),
        (
            KvRequest {
                ops: vec![get("a"); MAX_OPS + 1],
            },
            KvError::TooManyOps {
                count: MAX_OPS + 1,
                max: MAX_OPS,
            },
        ),
    ];
    for (request, refusal) in refusals {
        let response = leader
            .client_write(request)
            .await
            .expect("the entry is applied");
        assert_eq!(response.data.outcome, Err(refusal));
    }
    assert_eq!(
        cluster.reader(1).get(b"a").unwrap(),
        None,
        "a refused request wrote"
    );

    let transaction = KvRequest {
        ops: vec![
            put("a", b"1"),
            get("a"),
            KvOp::Delete { key: b"a".to_vec() },
            get("a"),
            put("b", b"2"),
        ],
    };
    let response = leader.client_write(transaction).await.expect("applied");
    let expected = vec![
        OpResult::Put { existed: false },
        OpResult::Get {
            value: Some(b"1".to_vec()),
        },
        OpResult::Delete { existed: true },
        OpResult::Get { value: None },
        OpResult::Put { existed: false },
    ];
    assert_eq!(response.data.outcome, Ok(expected));
    assert_eq!(cluster.reader(1).get(b"b").unwrap(), Some(b"2".to_vec()));
    cluster.shutdown().await;
}
