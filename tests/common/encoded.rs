//! Inputs in other encodings for the end-to-end tests that need them (`tests/inputs.rs`,
//! the docs' examples in `tests/docs.rs`): gzip, zstd and Parquet. Apart from `mod.rs` so
//! that only they compile polars.

use std::io::Write;
use std::path::Path;

use polars::prelude::*;

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

pub fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).unwrap()
}

/// Writes JSON Lines as a Parquet file with one column per key, the way a user exporting
/// the same events would: a column of integers where every value is an integer, of floats
/// where every value is a number, of booleans where every value is a boolean, else strings.
pub fn jsonl_to_parquet(jsonl: &[u8], out: &Path) {
    let objects: Vec<serde_json::Map<String, serde_json::Value>> = std::str::from_utf8(jsonl)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    let mut keys: Vec<String> = Vec::new();
    for object in &objects {
        for key in object.keys() {
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
    }
    let columns: Vec<Column> = keys
        .iter()
        .map(|key| {
            let values: Vec<Option<&serde_json::Value>> = objects
                .iter()
                .map(|o| o.get(key).filter(|v| !v.is_null()))
                .collect();
            let all =
                |test: fn(&serde_json::Value) -> bool| values.iter().flatten().all(|v| test(v));
            let name = key.as_str().into();
            if all(serde_json::Value::is_i64) {
                Column::new(
                    name,
                    values
                        .iter()
                        .map(|v| v.and_then(|v| v.as_i64()))
                        .collect::<Vec<_>>(),
                )
            } else if all(serde_json::Value::is_number) {
                Column::new(
                    name,
                    values
                        .iter()
                        .map(|v| v.and_then(|v| v.as_f64()))
                        .collect::<Vec<_>>(),
                )
            } else if all(serde_json::Value::is_boolean) {
                Column::new(
                    name,
                    values
                        .iter()
                        .map(|v| v.and_then(|v| v.as_bool()))
                        .collect::<Vec<_>>(),
                )
            } else {
                let text = |v: &serde_json::Value| match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                Column::new(name, values.iter().map(|v| v.map(text)).collect::<Vec<_>>())
            }
        })
        .collect();
    let mut frame = DataFrame::new_infer_height(columns).expect("a frame of the events");
    let file = std::fs::File::create(out).expect("create the Parquet file");
    ParquetWriter::new(file)
        .finish(&mut frame)
        .expect("write the Parquet file");
}
