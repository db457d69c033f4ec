/**
 * Vitest global setup, once per run before any test file: the bundles of the stdio fixtures, of the
 * reference server and of the store (test/support/programs.ts) are built here, side by side, when
 * their sources changed, so that no test stops its event loop for a build and no two forks build
 * the same program. Nothing to do with MCPSTORE_TEST_TSX=1 (the programs run through tsx or from
 * their packages).
 */
import { prebuild } from "./programs.js"

export default async function setup(): Promise<void> {
  await prebuild()
}
