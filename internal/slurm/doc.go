// Package slurm holds the test of deploy/slurm's job scripts against a
// real Slurm: Debian's slurmctld, slurmd and munge, started as root on
// this one machine (the machine is both controller and node), with
// aerie's simulator as the engine each worker job starts. It needs root
// and the packages slurm-wlm and munge, takes about a minute, and runs
// with AERIE_SLURM=1 (make slurm); otherwise it skips.
package slurm
