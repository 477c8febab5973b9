//! The README's quick start is `examples/basic.rs`, verbatim.

#[test]
fn readme_quick_start_is_the_basic_example() {
    let readme = include_str!("../../README.md");
    let example = include_str!("../../examples/basic.rs");
    let fence = "```rust,no_run\n";
    let section = &readme[readme
        .find("## Quick start")
        .expect("a quick start section")..];
    let code = &section[section.find(fence).expect("a rust code block") + fence.len()..];
    let code = &code[..code.find("```\n").expect("the end of the code block")];
    assert_eq!(
        code, example,
        "the quick start in README.md differs from examples/basic.rs: copy the example into it"
    );
}
