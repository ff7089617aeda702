fn main() -> std::process::ExitCode {
    diag::cli::main()
}
