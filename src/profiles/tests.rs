use super::*;

fn temp_dirs(count: usize) -> (PathBuf, Vec<PathBuf>) {
    let root = std::env::temp_dir().join(format!("deputy-profiles-{}", uuid::Uuid::new_v4()));
    let dirs: Vec<PathBuf> = (0..count).map(|index| root.join(format!("d{index}"))).collect();
    for dir in &dirs {
        std::fs::create_dir_all(dir).unwrap();
    }
    (root, dirs)
}

fn write(dir: &std::path::Path, file: &str, name: &str, description: &str, body: &str) {
    std::fs::write(dir.join(file), format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n"))
        .unwrap();
}

#[test]
fn the_first_directory_wins_a_name_and_broken_files_are_listed_with_their_reason() {
    let (root, dirs) = temp_dirs(2);
    write(&dirs[0], "reviewer.md", "reviewer", "Reviews.", "Project reviewer.");
    write(&dirs[1], "reviewer.md", "reviewer", "Reviews too.", "User reviewer.");
    write(&dirs[1], "planner.md", "planner", "Plans.", "Plan.");
    std::fs::write(dirs[1].join("broken.md"), "no frontmatter").unwrap();
    let profiles = Profiles::new(dirs.clone());

    let list = profiles.list();
    let rows: Vec<(&str, bool)> =
        list.agents.iter().map(|agent| (agent.name.as_str(), agent.invalid.is_none())).collect();
    assert_eq!(rows, [("reviewer", true), ("broken", false), ("planner", true), ("reviewer", false)]);
    assert!(list.agents[3].invalid.as_ref().unwrap().contains("shadowed"), "{list:?}");
    assert!(list.agents[1].invalid.as_ref().unwrap().contains("---"), "{list:?}");

    let reviewer = profiles.get("reviewer").unwrap();
    assert_eq!(reviewer.profile.system_prompt, "Project reviewer.");
    let unknown = profiles.get("nobody").unwrap_err().to_string();
    assert!(unknown.contains("known: reviewer, planner"), "{unknown}");
    let broken = profiles.get("broken").unwrap_err().to_string();
    assert!(broken.contains("not valid"), "{broken}");
    let detail = profiles.detail("planner").unwrap();
    assert_eq!((detail.summary.description.as_str(), detail.system_prompt.as_str()), ("Plans.", "Plan."));

    // An edit is a new version.
    let before = profiles.get("planner").unwrap().version;
    write(&dirs[1], "planner.md", "planner", "Plans better.", "Plan.");
    let after = profiles.get("planner").unwrap();
    assert_ne!(before, after.version);
    assert_eq!(after.agent_ref(), AgentRef { name: "planner".into(), version: after.version.clone() });
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn the_menu_is_bounded_and_says_what_it_left_out() {
    let (root, dirs) = temp_dirs(1);
    for index in 0..30 {
        write(&dirs[0], &format!("a{index:02}.md"), &format!("a{index:02}"), &"x".repeat(300), "");
    }
    let menu = Profiles::new(dirs).menu(1000);
    assert!(menu.len() < 1100, "{}", menu.len());
    assert!(menu.starts_with("\n- a00: "), "{menu}");
    assert!(menu.ends_with("more (deputy://agents)"), "{menu}");
    assert_eq!(Profiles::default().menu(1000), "");
    std::fs::remove_dir_all(root).unwrap();
}
