// Package upgrade tests aerie across versions, with real binaries: the
// release before feature checks, built from a git worktree of its commit
// in the test's temporary directory, beside today's build, and two
// builds of today's source of which one has a feature the other lacks
// (the aerie_testfeature build tag). Every prompt and sample must be
// written exactly once, whatever mix of versions serves the run and
// whatever is upgraded while it runs; a build that lacks a feature the
// run needs must stay away and say why.
//
// The tests are in upgrade_test.go; `make upgrade` runs them alone.
package upgrade
