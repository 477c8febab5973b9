use tracing_subscriber::{filter::LevelFilter, prelude::*, EnvFilter};

#[tracing::instrument(skip_all, fields(bytes = text.len()))]
fn parse(text: &str) -> Vec<u64> {
    text.split(',')
        .filter_map(|field| field.parse().ok())
        .collect()
}

#[tracing::instrument(skip_all, fields(items = numbers.len()))]
fn sort(numbers: &mut [u64]) {
    numbers.sort_unstable();
}

#[tracing::instrument(skip_all, fields(items = numbers.len()))]
fn hash(numbers: &[u64]) -> u64 {
    numbers.iter().fold(0xcbf2_9ce4_8422_2325, |h, &n| {
        (h ^ n).wrapping_mul(0x100_0000_01b3)
    })
}

fn main() -> Result<(), spanprof::Error> {
    let (layer, _guard) = spanprof::ProfileLayer::builder()
        .with_output_dir("target/spanprof") // profile.json goes here
        .build()?;
    tracing_subscriber::registry()
        // RUST_LOG decides which spans exist (unset or empty: "info", #[instrument]'s level)
        .with(
            EnvFilter::builder()
                .with_default_directive(LevelFilter::INFO.into())
                .from_env_lossy(),
        )
        .with(tracing_subscriber::fmt::layer()) // your logs, as before
        .with(layer)
        .init();

    let text: String = (0..100_000u64)
        .map(|i| format!("{},", i * 7919 % 100_003))
        .collect();
    let mut digest = 0;
    for _ in 0..100 {
        let mut numbers = parse(&text);
        sort(&mut numbers);
        digest = hash(&numbers);
    }
    tracing::info!(digest, "done");
    Ok(()) // `_guard` drops here: it prints the report and writes target/spanprof/profile.json
}
