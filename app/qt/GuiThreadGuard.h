// GuiThreadGuard: the check that keeps file IO and image encoding off the GUI thread.
//
// The architecture promises that the window's thread only runs widgets. Every function that
// reads or writes a run history, inspects a model folder or reads a preset calls
// assertNotGuiThread() first; when it finds itself on the thread of a QGuiApplication it logs a
// warning in the "tessera.threads" category ("file IO on the GUI thread: <what>") and counts
// it. The window's test suites turn that warning into a failure (QTest::failOnWarning), so a
// change that brings IO back onto the GUI thread fails a test instead of freezing a window.
//
// Without a QGuiApplication (tessera-cli, the Qt Core test suites) there is no GUI thread and
// the check never fires: there the calling thread is the one meant to do the work. The check
// is a pointer comparison, so it stays on in every build.
#pragma once

namespace tessera {

// Logs and counts a violation when called on a QGuiApplication's thread. `what` names the
// function (a string literal); it is quoted in the warning. Thread-safe.
void assertNotGuiThread(const char* what);

// How many violations were seen since the process started (or the last reset). Thread-safe.
int guiThreadViolations();
// The `what` of the most recent violation; empty when none was seen.
const char* lastGuiThreadViolation();
void resetGuiThreadViolations();

// The warning's text starts with this, so tests can match it.
inline constexpr const char* kGuiThreadViolationPrefix = "file IO on the GUI thread: ";

}  // namespace tessera
