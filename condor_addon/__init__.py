"""The HTCondor adapter of coshare: Source and Editor over the htcondor2 bindings, the job
wrapper, and configuration snippets."""
