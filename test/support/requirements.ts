/**
 * The programs some tests need beyond Node (Debian's redis-server and Chromium): whether each is
 * installed, and whether this run requires it. A plain `npm test` on a machine without them skips the
 * tests that need them (the skip reporter names them at the end); `.ci/run` sets
 * `MCPSTORE_TEST_REQUIRE=redis,chromium`, and then those tests run and fail instead.
 */
import { spawnSync } from "node:child_process"
import { existsSync } from "node:fs"

/** A program the suite can need. */
export type Requirement = "redis" | "chromium"

/** Where the browser tests find Chromium. */
export const CHROMIUM = "/usr/bin/chromium"

/** The Debian package of each requirement, and what installs it. */
export const PACKAGES: Readonly<Record<Requirement, string>> = { redis: "redis-server", chromium: "chromium" }

/** The command that installs the missing requirements (Debian or Ubuntu). */
export const installCommand = (missing: ReadonlyArray<Requirement>): string =>
  `sudo apt-get install -y ${missing.map((r) => PACKAGES[r]).join(" ")}`

/** True when the program is installed on this machine. */
export const installed = (what: Requirement): boolean =>
  what === "chromium" ? existsSync(CHROMIUM) : spawnSync("redis-server", ["--version"], { stdio: "ignore" }).status === 0

/** True when MCPSTORE_TEST_REQUIRE (a comma-separated list, or `all`) names it. */
export const required = (what: Requirement): boolean => {
  const list = (process.env["MCPSTORE_TEST_REQUIRE"] ?? "").split(",").map((s) => s.trim())
  return list.includes(what) || list.includes("all")
}

/** The tests that need `what` run: it is installed, or the run requires it (then its absence fails them). */
export const runsWith = (what: Requirement): boolean => installed(what) || required(what)

/** The error a required program that is missing fails its tests with. */
export const missingError = (what: Requirement): Error =>
  new Error(`${PACKAGES[what]} is not installed and this run requires it (MCPSTORE_TEST_REQUIRE): ${installCommand([what])}`)
