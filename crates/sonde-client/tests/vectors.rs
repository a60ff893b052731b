//! The client's encoding reproduces every msgpack wire vector that lists
//! its emits, byte for byte, and writes values as `values.json` says.

use sonde_client::wire;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn emits_encode_to_the_vector_bytes() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/vectors/msgpack"
    );
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let Some(emits) = v["emits"].as_array() else {
            continue;
        };
        let mut body = Vec::new();
        for e in emits {
            let f = |k: &str| e[k].as_str().unwrap().to_string();
            wire::write_message(
                &mut body,
                &f("type"),
                &f("name"),
                &f("value"),
                &f("tags"),
                &f("ts"),
            );
        }
        let got = wire::datagram(&body, emits.len());
        assert_eq!(
            hex(&got),
            v["bytes_hex"].as_str().unwrap(),
            "{}",
            path.display()
        );
        checked += 1;
    }
    assert!(
        checked >= 5,
        "only {checked} vectors with emits found in {dir}"
    );
}

#[test]
fn values_are_written_as_the_shared_vectors_say() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/vectors/values.json"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    for c in cases {
        let n = c[0].as_f64().unwrap();
        assert_eq!(wire::value_text(n).as_deref(), c[1].as_str(), "{n}");
    }
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert_eq!(wire::value_text(bad), None);
    }
}
