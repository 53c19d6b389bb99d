"""What a person reads, and what leaves for other tools.

answer             the answer a validation prints last
render             report.md of a validation
render_claims      its section on the paper's claims
render_divergence  its section on scheduling divergence
render_three_way   its section on ns-3 against the emulation
model_table        the flow models' table
plots              PNG plots (matplotlib, headless)
folder_comparison  `testbed compare`: two run folders, cell by cell
exported           `testbed export-workload`: the exact work a run served
predictions        `testbed judge --predictions`: another simulator judged against packets
"""
