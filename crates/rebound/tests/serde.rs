//! The `serde` feature: options read from partial configuration, reports
//! written and read back. (`cargo test --workspace` builds the engine with
//! the feature, which the tool crate enables.)
#![cfg(feature = "serde")]

use rebound::{
    CheckpointMode, Database, Durability, GcOptions, MediumChoice, Options, SimDevice, TableOptions,
};
use std::time::Duration;

#[test]
fn options_come_from_partial_json_with_defaults_elsewhere() {
    let options: Options = serde_json::from_str(
        r#"{"durability": "None", "checkpoint": "Off",
            "checkpoint_interval": {"secs": 2, "nanos": 0},
            "gc": {"threshold": 0.5}}"#,
    )
    .unwrap();
    assert_eq!(options.durability, Durability::None);
    assert_eq!(options.checkpoint, CheckpointMode::Off);
    assert_eq!(options.checkpoint_interval, Duration::from_secs(2));
    assert_eq!(options.gc.threshold, 0.5);
    let defaults = Options::default();
    assert_eq!(options.max_size, defaults.max_size);
    assert_eq!(options.gc.batch_blocks, GcOptions::default().batch_blocks);
    assert!(matches!(options.medium, MediumChoice::Auto));

    let table: TableOptions = serde_json::from_str(r#"{"max_key_len": 16}"#).unwrap();
    assert_eq!(
        (table.max_key_len, table.max_value_len),
        (16, rebound::DEFAULT_MAX_VALUE_LEN)
    );
    let round_trip: Options =
        serde_json::from_str(&serde_json::to_string(&options).unwrap()).unwrap();
    assert_eq!(round_trip.checkpoint_interval, options.checkpoint_interval);
    assert!(serde_json::from_str::<Options>(r#"{"durability": "Sometimes"}"#).is_err());
}

#[test]
fn a_simulated_medium_has_no_serialized_form() {
    let options = Options::default().medium(MediumChoice::Simulated(SimDevice::new(1 << 20)));
    assert!(serde_json::to_string(&options).is_err());
}

#[test]
fn reports_serialize_with_their_fields() {
    let device = SimDevice::new(1 << 28);
    let options = Options::default().medium(MediumChoice::Simulated(device.clone()));
    let db = Database::open("unused", options.clone()).unwrap();
    let t = db.create_table("t", TableOptions::default()).unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    tx.insert(&t, b"k", b"v").unwrap();
    tx.commit().unwrap();
    let checkpoint = serde_json::to_value(db.checkpoint().unwrap()).unwrap();
    assert_eq!(checkpoint["entries"], 1);
    let stats = serde_json::to_value(db.stats()).unwrap();
    assert_eq!(stats["commits"], 1);
    assert_eq!(stats["tables"][0]["name"], "t");
    assert!(stats["gc"]["time"]["nanos"].is_u64());
    let back: rebound::Stats = serde_json::from_value(stats).unwrap();
    assert_eq!(back.tables[0].index_entries, 1);
    drop((session, t, db));

    let db = Database::open(
        "unused",
        options.medium(MediumChoice::Simulated(device.crash(1))),
    )
    .unwrap();
    let report = serde_json::to_value(db.recovery_report()).unwrap();
    assert_eq!(report["from_checkpoint"], true);
    assert_eq!(report["checkpoint_entries"], 1);
    let back: rebound::RecoveryReport = serde_json::from_value(report).unwrap();
    assert_eq!(back.total, db.recovery_report().total);
}
