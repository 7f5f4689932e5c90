//! The linker script of the release build's start-up order
//! (`build/startup_order.rs`, included here as the build script includes
//! it): what it takes from the list, and that the list in the repository
//! gives a script this machine's linker takes.

#![allow(dead_code)] // the build script's entry point is not called here

include!("../build/startup_order.rs");

#[test]
fn the_script_lists_each_pattern_in_both_section_names_it_may_have() {
    let script = linker_script("# a comment\n\nsqlite3_free\n_ZN4core3fmt5write17h*\n");
    assert!(
        script.starts_with("SECTIONS {\n  .text.hot : {\n"),
        "{script}"
    );
    assert!(
        script.ends_with("  }\n} INSERT BEFORE .text;\n"),
        "{script}"
    );
    assert!(script.contains("    *(.text.sqlite3_free .text.unlikely.sqlite3_free)\n"));
    assert!(
        script.contains(
            "    *(.text._ZN4core3fmt5write17h* .text.unlikely._ZN4core3fmt5write17h*)\n"
        )
    );
    assert_eq!(script.matches("*(").count(), 2, "{script}");
}

#[test]
fn a_line_that_is_not_a_symbol_pattern_is_left_out() {
    let script = linker_script("(below main)\nfoo) *(.data\nname with space\nok_name\n");
    assert_eq!(script.matches("*(").count(), 1, "{script}");
    assert!(script.contains(".text.ok_name "), "{script}");
}

/// Links an empty program with `script`, as the build script's probe does.
#[cfg(target_os = "linux")]
fn probe(script: &str) -> bool {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("startup.ld");
    std::fs::write(&path, script).expect("the script written");
    links_with(&path, dir.path())
}

#[cfg(target_os = "linux")]
#[test]
fn the_list_in_the_repository_gives_a_script_the_linker_takes() {
    let list = concat!(env!("CARGO_MANIFEST_DIR"), "/build/startup-functions.txt");
    let listed = std::fs::read_to_string(list).expect("the list of start-up functions");
    let script = linker_script(&listed);
    assert!(script.matches("*(").count() > 500, "{script}");
    assert!(
        probe(&script),
        "an empty program does not link with the script"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn the_probe_refuses_a_script_the_linker_does_not_take() {
    assert!(!probe(
        "SECTIONS { .text.hot : { *(.text.x) } INSERT BEFORE"
    ));
}
