//! Fuzzes `portico::fuzzing::request` (see its documentation for what is checked).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| portico::fuzzing::request(data));
