/**
 * Debian's Chromium for the browser tests, driven by playwright-core: where it is, whether it is
 * installed (the tests skip, with a note, when not; .ci/run installs it when it can), and one way
 * to launch it headless with its background traffic (updates, sync) off.
 */
import { existsSync } from "node:fs"
import type { Browser } from "playwright-core"

export const CHROMIUM = "/usr/bin/chromium"
export const haveChromium = existsSync(CHROMIUM)

/** Warns once per test file that the browser test is skipped. */
export const noteMissingChromium = (what: string): void => {
  if (!haveChromium) console.warn(`${what} skipped: ${CHROMIUM} is not installed (apt-get install -y chromium; .ci/run does it when it can)`)
}

/** Headless Chromium; `extraArgs` are added to the usual flags. */
export const launchChromium = async (extraArgs: ReadonlyArray<string> = []): Promise<Browser> => {
  // Loaded here, on first use: only the browser tests pay for loading playwright-core.
  const { chromium } = await import("playwright-core")
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      ...extraArgs
    ]
  })
}
