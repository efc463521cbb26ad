//! attempt-funnel, the command: parses the command line, hands it to its command, prints
//! the error and exits. Everything else is the library (`src/lib.rs`).

use clap::Parser;

use attempt_funnel::cli::{Cli, Command};
use attempt_funnel::{commands, exit_codes};

/// mimalloc: millions of small per-operation allocations from several threads are its
/// home ground. Built with `no_thp`: by default it asks the kernel for transparent huge
/// pages on its memory, and then the first touch of any byte of a 2 MiB range faults in
/// and zeroes all of it, so each thread's scattered small allocations would hold whole
/// huge pages.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    commands::prepare_process();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // A usage error takes the one prefix every error of ours has; help and the
            // version (also the help shown for a missing command) go out as clap has them.
            let text = err.render().to_string();
            match text.strip_prefix("error: ") {
                Some(message) if err.use_stderr() => {
                    eprint!("attempt-funnel: {message}");
                    std::process::exit(exit_codes::ERROR);
                }
                _ => err.exit(),
            }
        }
    };
    let result = match cli.command {
        Command::Analyze(args) => commands::analyze::run(args),
        Command::Generate(args) => commands::generate::generate(args),
        Command::Convert(args) => commands::convert::convert(args),
        Command::Show(args) => commands::show::run(args),
        Command::Replay(args) => commands::replay::replay(args),
        Command::Diff(args) => commands::diff::diff(args),
        Command::Merge(args) => commands::merge::merge(args),
        Command::Completions(args) => commands::completions::completions(args),
        Command::Man(args) => commands::man::man(&args.dir),
        Command::ParquetWorker(args) => Ok(commands::parquet_worker(&args.columns)),
    };
    let code = match result {
        Ok(code) => code,
        Err(err) if commands::is_broken_pipe(&err) => exit_codes::SUCCESS,
        Err(err) => {
            eprintln!("attempt-funnel: {}", commands::error_text(&err));
            exit_codes::ERROR
        }
    };
    std::process::exit(code);
}
