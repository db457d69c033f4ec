/**
 * A vitest reporter that ends the run with what it did not test: the files whose tests were skipped,
 * the programs they need that are missing here, and the command that installs them. The suite skips
 * nothing otherwise, so a skip always means a missing program (requirements.ts), and a green run on a
 * machine without Redis or Chromium says so instead of passing in silence.
 */
import { relative } from "node:path"
import type { Reporter, TestModule } from "vitest/node"
import { installCommand, installed, type Requirement } from "./requirements.js"

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? "" : "s"}`

export default class SkipReporter implements Reporter {
  private readonly skipped = new Map<string, number>()

  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const skipped = this.skipped
    skipped.clear()
    for (const module of testModules) {
      // A file whose set-up failed reports its tests as skipped: that is a failure, shown as one.
      if (module.state() === "failed") continue
      let count = 0
      for (const test of module.children.allTests()) if (test.result().state === "skipped") count++
      if (count > 0) skipped.set(relative(process.cwd(), module.moduleId), count)
    }
  }

  // Printed here, after the default reporter's summary (it prints in onFinished, which follows onTestRunEnd).
  onFinished(): void {
    const skipped = this.skipped
    if (skipped.size === 0) return
    const missing = (["redis", "chromium"] as const).filter((r: Requirement) => !installed(r))
    const total = [...skipped.values()].reduce((a, b) => a + b, 0)
    const lines = [
      "",
      `SKIPPED: ${plural(total, "test")} in ${plural(skipped.size, "file")} did not run${missing.length > 0 ? ` (missing: ${missing.join(", ")})` : ""}:`,
      ...[...skipped].sort().map(([file, n]) => `  ${file} (${n})`),
      missing.length > 0
        ? `Install what they need, then run them again: ${installCommand(missing)}`
        : "Nothing they need is missing: a test was skipped by hand, which the suite does not allow.",
      ""
    ]
    process.stdout.write(`${lines.join("\n")}\n`)
  }
}
