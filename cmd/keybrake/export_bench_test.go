package main

// RedactCommand exposes redactCommand to the external tests.
var RedactCommand = redactCommand
