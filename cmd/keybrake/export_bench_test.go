package main

// RedactCommand exposes redactCommand to the external tests.
var RedactCommand = redactCommand

// ChildEnv exposes childEnv to the external tests.
var ChildEnv = childEnv

// ParseProcStatus exposes parseProcStatus to the external tests.
var ParseProcStatus = parseProcStatus

// ParseProcStat exposes parseProcStat to the external tests.
var ParseProcStat = parseProcStat
