//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "kinit: the init of a Linux test guest")
	os.Exit(2)
}
