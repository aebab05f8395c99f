//go:build !unix

package hiddenstates

import "os"

// sameFileSystem is false where it cannot be told: the file is copied.
func sameFileSystem(string, string) (bool, error) { return false, nil }

// tryShared takes no lock where there is no flock: the writer's lock is
// a POSIX one.
func tryShared(*os.File) (bool, error) { return true, nil }

func unlock(*os.File) {}
