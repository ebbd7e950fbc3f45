"""What every stage builds on (layer: core), each defined once: paths and the lab's constants,
the user-error type, shared argparse types, exact TTFT statistics, all-or-nothing outputs and
the fitted step-time file's linear form (``fitted_step_time``)."""
