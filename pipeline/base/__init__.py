"""What every stage builds on, each defined once: paths and the lab's constants, the user-error
type, shared argparse types, exact TTFT statistics and all-or-nothing outputs."""
