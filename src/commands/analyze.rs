//! `analyze`: read, analyse (in memory, or partition by partition when the input does not
//! fit the memory budget), report and gate; `analyze --format partial` writes one
//! partition's result for `merge`.

use anyhow::{Context, Result};

use crate::config::{AnalyzeConfig, JunitOnError};
use crate::gate::condition::Origin;
use crate::output::{check_outputs, junit_on_error, report_run, write_with, RowsOut};
use crate::report::OutputFormat;
use crate::rules::Rules;
use crate::stats::AttemptStats;
use crate::{analysis, cli, config, ingest, partial, profile, summary};

/// `analyze` from its flags.
pub fn run(args: cli::AnalyzeCommand) -> Result<i32> {
    analyze(config::analyze(args)?)
}

/// `analyze`. The gate's verdict, its exit code and the JUnit file depend on the input and
/// the conditions only: a reader of the report that stops reading (`| head`) changes none of
/// them, and a run that stops on an error still leaves a JUnit file that says so.
pub fn analyze(config: AnalyzeConfig) -> Result<i32> {
    let junit = config.gate.junit.clone().map(|target| JunitOnError {
        target,
        report_only: config.gate.report_only,
    });
    junit_on_error(junit, analyze_run(config))
}

pub fn analyze_run(config: AnalyzeConfig) -> Result<i32> {
    check_outputs(&config.input.paths, &config.outputs())?;
    if config.format == OutputFormat::Partial {
        return write_partial(config);
    }
    let mut stages = profile::Stages::from_env();
    let read = ingest::read_partitioned(&config.input, &config.rules.hops)?;
    stages.mark("ingest");
    // The worst operations keep their attempts for the timelines.
    let keep = analysis::Keep::Worst(config.top.min(summary::TIMELINES_DRAWN));
    let mut out = RowsOut::open(&config)?;
    let analysis = out.run(|sink| analyze_partitions(read, &config.rules, &keep, config.top, sink));
    stages.mark("normalize+group+classify");
    report_run(&config, analysis?, out, stages)
}

/// Analyses what was read: everything at once when it fitted the memory budget, else each
/// spilled partition in turn into a partial, then the partials merged (the merge that
/// `attempt-funnel merge` runs over partials from several machines).
pub fn analyze_partitions(
    read: ingest::Partitioned,
    rules: &Rules,
    keep: &analysis::Keep,
    listed: usize,
    sink: &mut dyn analysis::tally::RowSink,
) -> Result<analysis::Analysis> {
    if read.spill.is_none() {
        return partial::analyze(read.head, rules, keep, listed, sink);
    }
    release_free_memory(PARTITION_PURGE_DELAY_MS);
    let mut partials: Vec<partial::Partial> = Vec::new();
    let mut purge = PartitionPurge::default();
    let dir = read.partitions(
        |part, dir, number| {
            crate::profile::note("partition read back");
            // Each partition knows the trace end of all the input: nothing is deferred. Its
            // events are dropped once analysed; its strings are read into again. Its rows
            // and retry starts wait on disk for the merge: no partition's rows stay in
            // memory, and the merge reads the retry starts one hop at a time.
            let name = format!("partition-{number}");
            let partial = partial::build(part, rules, keep, true, dir.map(|d| (d, name.as_str())))?;
            if dir.is_some() {
                crate::profile::note("partition spilled");
            }
            Ok(partial)
        },
        |mut partial| {
            // Statistics are folded into the first partition's as each one ends, in the
            // partitions' order, and the merge adds up the same numbers: a partition's
            // time histogram and latency sketches are a megabyte or two, and held until
            // the merge, the hundreds of partitions of a large run would dominate its peak
            // memory.
            if let Some(first) = partials.first_mut() {
                let stats =
                    std::mem::replace(&mut partial.stats, AttemptStats::new(rules.hops.len()));
                first.stats.merge(&stats)?;
            }
            partials.push(partial);
            purge.after_partition();
            crate::profile::note("partition analysed");
            Ok(())
        },
    )?;
    // The merge's peak is the burst rule's, one hop's retry starts at a time: what one hop
    // freed is gone before the next one's are read.
    release_free_memory(0);
    let analysis = partial::merge(partials, rules, keep.worst(listed), sink);
    drop(dir);
    analysis
}

/// `analyze --format partial`: this partition's result, before the merge. It keeps the
/// attempts of its `summary::TIMELINES_DRAWN` worst operations whatever `--top` is (the
/// merge's `--top` decides), and defers operations with an unfinished attempt: only the
/// merge knows where all the input ends. The gate runs at the merge.
pub fn write_partial(config: AnalyzeConfig) -> Result<i32> {
    if config
        .gate
        .conditions
        .iter()
        .any(|c| c.origin == Origin::Flag)
        || config.gate.junit.is_some()
    {
        anyhow::bail!(
            "--fail-on and --junit apply to the whole run: give them to `attempt-funnel merge`, which gates the merged partials"
        );
    }
    let mut ingested = ingest::read_inputs(&config.input, &config.rules.hops)?;
    let keep = analysis::Keep::Worst(summary::TIMELINES_DRAWN);
    let mut partial = partial::build(&mut ingested, &config.rules, &keep, false, None)?;
    partial.share = partial::Share::of(config.input.partition);
    drop(ingested);
    write_with(&config.output, |mut out| {
        partial::format::write(&partial, &mut out)
            .with_context(|| format!("could not write the partial to {}", config.output.display()))
    })?;
    Ok(partial::merge::diagnostics(std::slice::from_ref(&partial)).report())
}

/// Hands what the allocator caches now back to the system, and from now on memory freed
/// `delay_ms` after it is freed. A spilled run reads partition after partition into memory
/// freed by the one before; kept (see [`MI_OPTION_PURGE_DELAY`]), what each partition left
/// in the allocator's caches added up over the run (3.4 GB at 10 M operations under a
/// 1 GiB limit).
pub fn release_free_memory(delay_ms: std::ffi::c_long) {
    // SAFETY: sets a process-wide allocator option, as `main` does, and asks the allocator
    // to purge what it caches; any thread may call these.
    unsafe {
        // Pages the collection frees now go back at once.
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
        libmimalloc_sys::mi_collect(true);
        // What was freed earlier under a delay waits in the arenas: a forced collection
        // purges it only while the delay is positive (at 0 mimalloc's purge returns at
        // once, "nothing will be scheduled"), so it stayed, the last partition's event
        // vector through the merge among it.
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 1);
        libmimalloc_sys::mi_collect(true);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, delay_ms);
    }
}

/// When the pages freed by a partition are handed back to the system: not after every
/// partition, as each partition's pass needs about as much memory as the one before, and
/// would fault in and zero again the pages just handed back. Kept, what the allocator
/// caches drifts upwards, a few MB a partition (each thread's heap keeps what it freed,
/// and the next partition's work lands on other threads). So the free pages go back once the
/// resident memory at a partition's end has grown a tenth past the first partition's end;
/// where it cannot be read (not Linux), after every partition.
#[derive(Debug, Default)]
pub struct PartitionPurge {
    /// The resident memory at the first partition's end, in MB.
    first_mb: Option<u64>,
}

impl PartitionPurge {
    /// The growth past the first partition's resident memory allowed before a purge: a
    /// tenth (BENCHMARKS.md: neither a smaller nor a larger share was faster).
    const DRIFT_DIVISOR: u64 = 10;

    fn after_partition(&mut self) {
        if self.purge_at(crate::profile::resident_mb()) {
            release_free_memory(PARTITION_PURGE_DELAY_MS);
        }
    }

    /// Whether to purge at a partition's end with `now_mb` resident.
    fn purge_at(&mut self, now_mb: Option<u64>) -> bool {
        match (self.first_mb, now_mb) {
            (_, None) => true,
            (None, Some(now)) => {
                self.first_mb = Some(now);
                false
            }
            (Some(first), Some(now)) => now > first + first / Self::DRIFT_DIVISOR,
        }
    }
}

/// The purge delay while partitions are analysed: not at once, because handing back every
/// page the moment it was freed makes the per-operation pass fault in and zero the same
/// pages again and again; the cost is a little more peak memory, well within the 1 GiB
/// default (BENCHMARKS.md has both). The merge purges at once (`analyze_partitions`): its
/// working set is the run's largest. The delay is longer than a partition's read and pass
/// take, so that pages one partition's reading freed are still there for its pass.
pub const PARTITION_PURGE_DELAY_MS: std::ffi::c_long = 1000;

/// `mi_option_purge_delay` in mimalloc.h (v3), which libmimalloc-sys does not name. By
/// default freed memory is handed back to the kernel after a delay and comes back as freshly
/// zeroed (often huge) pages, and the zeroing can take more CPU than the analysis. A run is
/// short; keep the memory. A test checks the number against mimalloc's own name.
pub const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// A spilled run's merge reads one file per partition at once, for each hop searched at
/// once: hundreds at tens of millions of operations, and more where partitions were split
/// again. The soft limit on open files (often 1 024) is raised to the hard one, or as near
/// as the system lets a process go (macOS refuses an unlimited one).
#[cfg(unix)]
pub fn raise_open_files_limit() {
    // SAFETY: getrlimit and setrlimit read and write only the struct they are given.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 || limit.rlim_cur >= limit.rlim_max
        {
            return;
        }
        let current = limit.rlim_cur;
        for wanted in [limit.rlim_max, 10_240] {
            if wanted > current {
                limit.rlim_cur = wanted;
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                    return;
                }
            }
        }
    }
}

#[cfg(not(unix))]
pub fn raise_open_files_limit() {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{c_char, c_void, CStr};

    extern "C" {
        /// Exported by mimalloc (v3) but not declared by libmimalloc-sys: writes every
        /// option as `option 'NAME': VALUE`.
        fn mi_options_print_out(out: libmimalloc_sys::mi_output_fun, arg: *mut c_void);
    }

    unsafe extern "C" fn collect(msg: *const c_char, arg: *mut c_void) {
        // SAFETY: `arg` is the String passed below, alive for the call; `msg` is a C string.
        let out = unsafe { &mut *arg.cast::<String>() };
        out.push_str(&unsafe { CStr::from_ptr(msg) }.to_string_lossy());
    }

    #[test]
    fn partitions_purge_once_resident_memory_drifts_a_tenth_past_the_first() {
        let mut purge = PartitionPurge::default();
        assert!(
            !purge.purge_at(Some(200)),
            "the first partition sets the mark"
        );
        assert!(!purge.purge_at(Some(215)));
        assert!(!purge.purge_at(Some(220)));
        assert!(purge.purge_at(Some(221)));
        assert!(
            !purge.purge_at(Some(150)),
            "the mark stays the first partition's"
        );
        assert!(purge.purge_at(None), "unknown: every time");
        assert!(PartitionPurge::default().purge_at(None));
    }

    #[test]
    fn the_purge_delay_option_number_is_mimallocs_purge_delay() {
        const MARK: std::ffi::c_long = 7_654_321;
        let mut printed = String::new();
        // SAFETY: options are process-wide integers; `collect` only appends to `printed`,
        // which outlives the call.
        unsafe {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, MARK);
            mi_options_print_out(Some(collect), (&mut printed as *mut String).cast());
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
        }
        assert!(
            printed.contains(&format!("option 'purge_delay': {MARK}")),
            "{printed}"
        );
    }
}
