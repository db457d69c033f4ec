/**
 * Vitest global setup, once per run before any test file: the bundles of the stdio fixtures and of
 * the reference server (test/support/programs.ts) are built here when their sources changed, so that
 * no test stops its event loop for a build. Nothing to do with MCPSTORE_TEST_TSX=1 (the fixtures run
 * through tsx, the reference server from its package).
 */
import { everythingProgram, fixtureBundles } from "./programs.js"

export default function setup(): void {
  if (process.env["MCPSTORE_TEST_TSX"] !== "1") {
    fixtureBundles()
    everythingProgram()
  }
}
