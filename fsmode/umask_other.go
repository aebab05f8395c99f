//go:build !unix

package fsmode

func setUmask(int) int { return -1 }
