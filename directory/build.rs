fn main() {
    // `--cfg loom` (scripts/loom.sh) selects the loom models; declare it for check-cfg.
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
