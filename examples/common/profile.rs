//! `--profile FILE` for the examples: profile the run, print the report, write the Chrome trace
//! and a JSON summary.
use ferrocuda::{Context, Result};

/// The file after `--profile`, if given.
pub fn profile_path(args: &[String]) -> Option<String> {
    let at = args.iter().position(|a| a == "--profile")?;
    match args.get(at + 1) {
        Some(file) if !file.starts_with("--") => Some(file.clone()),
        _ => {
            eprintln!("--profile needs a file name (the Chrome trace to write)");
            std::process::exit(2);
        }
    }
}

/// Where the summary of `--profile trace.json` goes: `trace.summary.json` (the `.json` of the
/// trace's name replaced, else appended to).
pub fn summary_path(trace: &str) -> String {
    format!("{}.summary.json", trace.strip_suffix(".json").unwrap_or(trace))
}

/// Print the profile of the training run, write its Chrome trace to `trace` and the summary
/// beside it.
pub fn write_profile(ctx: &Context, trace: &str) -> Result<()> {
    let report = ctx.profile_report()?;
    print!("{report}");
    if let Some(dir) = std::path::Path::new(trace).parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| ferrocuda::Error::Io {
            op: "--profile",
            path: dir.display().to_string(),
            source,
        })?;
    }
    report.write_chrome_trace(trace)?;
    let summary = summary_path(trace);
    report.write_json(&summary)?;
    println!("profile: Chrome trace {trace} (open in ui.perfetto.dev), summary {summary}");
    Ok(())
}
