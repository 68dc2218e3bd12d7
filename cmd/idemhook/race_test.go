//go:build race

package main

// raceEnabled: the test binary, and so every gateway process the tests
// start from it, runs under the race detector, which takes several times
// the memory and the CPU of a plain build.
const raceEnabled = true
