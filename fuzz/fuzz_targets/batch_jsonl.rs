//! libFuzzer entry point; the checks live in `mooncdc_fuzz::batch_jsonl`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mooncdc_fuzz::batch_jsonl(data));
