/**
 * A vitest reporter that ends the run with what it did not test when redis-server or Chromium is
 * missing here (requirements.ts): the files whose tests were skipped, and the command that installs
 * what they need, so a green run on a machine without them says so instead of passing in silence.
 */
import { relative } from "node:path"
import type { Reporter, TestModule, Vitest } from "vitest/node"
import { installCommand, installed, type Requirement } from "./requirements.js"

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? "" : "s"}`

export default class SkipReporter implements Reporter {
  private readonly skipped = new Map<string, number>()
  private filtered = false

  onInit(vitest: Vitest): void {
    // A run narrowed by test name (-t) skips the other tests on purpose.
    this.filtered = vitest.config.testNamePattern !== undefined
  }

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
    const missing = (["redis", "chromium"] as const).filter((r: Requirement) => !installed(r))
    // Only the skips a missing program explains are this reporter's to name.
    if (skipped.size === 0 || missing.length === 0 || this.filtered) return
    const total = [...skipped.values()].reduce((a, b) => a + b, 0)
    const lines = [
      "",
      `SKIPPED: ${plural(total, "test")} in ${plural(skipped.size, "file")} did not run (missing: ${missing.join(", ")}):`,
      ...[...skipped].sort().map(([file, n]) => `  ${file} (${n})`),
      `Install what they need, then run them again: ${installCommand(missing)}`,
      ""
    ]
    process.stdout.write(`${lines.join("\n")}\n`)
  }
}
