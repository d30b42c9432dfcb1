//! Link settings for the binary users run (issue 31, docs/BENCHMARKS.md "Binary size").
//!
//! Cargo profiles cannot carry linker flags, so the optimised builds of the executables get
//! them here. Only where the linker is known to be LLD, which rustc uses by default on
//! x86-64 Linux since 1.90: a linker set by the user (`RUSTC_LINKER`, or linker flags of their
//! own) is left alone, as are debug builds, whose quick link matters more than their size.
//! The variable is `DEPUTY_LINK_DEFAULTS=1` for a build that wants none of this.

use std::env;

fn main() {
    println!("cargo:rerun-if-env-changed=DEPUTY_LINK_DEFAULTS");
    let target = env::var("TARGET").unwrap_or_default();
    let optimised = env::var("OPT_LEVEL").is_ok_and(|level| level != "0");
    let linker_of_their_own = env::var_os("RUSTC_LINKER").is_some()
        || env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|flags| flags.contains("linker"));
    let opted_out = env::var_os("DEPUTY_LINK_DEFAULTS").is_some();
    if target != "x86_64-unknown-linux-gnu" || !optimised || linker_of_their_own || opted_out {
        return;
    }
    // Relative relocations packed as bitmaps (DT_RELR, glibc 2.36 and later): the executable
    // stays position-independent, so its address is still randomised, without a 24-byte
    // record for each of its ~40,000 pointers to itself.
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    // Identical machine code folded into one copy: generic code instantiated for types of the
    // same layout often compiles to the same bytes.
    println!("cargo:rustc-link-arg-bins=-Wl,--icf=all");
}
