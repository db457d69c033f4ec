/**
 * Debian's Chromium for the browser tests, driven by playwright-core: whether the browser tests run
 * (a plain `npm test` without it skips them; .ci/run installs it and requires it, requirements.ts), and
 * one way to launch it headless with its background traffic (updates, sync) off.
 */
import type { Browser } from "playwright-core"
import { CHROMIUM, installed, missingError, runsWith } from "./requirements.js"

/** True when the browser tests run: Chromium is installed, or the run requires it (then its absence fails them). */
export const haveChromium = runsWith("chromium")

/** Warns once per test file that the browser test is skipped. */
export const noteMissingChromium = (what: string): void => {
  if (!haveChromium) console.warn(`${what} skipped: ${CHROMIUM} is not installed (sudo apt-get install -y chromium)`)
}

/** Headless Chromium; `extraArgs` are added to the usual flags. */
export const launchChromium = async (extraArgs: ReadonlyArray<string> = []): Promise<Browser> => {
  if (!installed("chromium")) throw missingError("chromium")
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
