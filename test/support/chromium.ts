/**
 * Debian's Chromium for the browser tests, driven by playwright-core: whether the browser tests run
 * (a plain `npm test` without it skips them; .ci/run installs it and requires it, requirements.ts), and
 * one way to launch it headless with its background traffic (updates, sync) off. A fork runs many
 * files (vitest.config.ts), so the browser tests share one Chromium per fork (`openChromium`), each
 * file in browser contexts of its own: a launch (browser, zygotes, GPU process) cost about 5 s of CPU.
 */
import type { Browser, BrowserContext, Locator, Page } from "playwright-core"
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

/** A file's share of the fork's Chromium: the contexts it opens, all closed by `close`. */
export interface ChromiumLease {
  newContext(options?: Parameters<Browser["newContext"]>[0]): Promise<BrowserContext>
  /** Closes every context of this lease (the browser stays for the fork's next file). */
  close(): Promise<void>
}

// On globalThis: a file that resets the module cache still finds the fork's browser, not a second one.
const SHARED = Symbol.for("mcp-store.test.chromium")
type Holder = { [SHARED]?: Promise<Browser> }

/**
 * The fork's Chromium (launched on first use, launched again if it went away), as a lease whose
 * contexts are the file's own. Playwright ends the browser when the fork exits (its exit handler, and
 * the browser's pipe closing).
 */
export const openChromium = async (): Promise<ChromiumLease> => {
  const holder = globalThis as Holder
  let browser = await (holder[SHARED] ??= launchChromium())
  if (!browser.isConnected()) browser = await (holder[SHARED] = launchChromium())
  const contexts = new Set<BrowserContext>()
  return {
    newContext: async (options) => {
      const context = await browser.newContext(options)
      contexts.add(context)
      return context
    },
    close: async () => {
      await Promise.all([...contexts].map((context) => context.close().catch(() => undefined)))
      contexts.clear()
    }
  }
}

/** A service's row on the dashboard (`/ui`), by name and scope. */
export const serviceRow = (page: Page, name: string, scope = "store"): Locator =>
  page.locator(`[data-testid="service-row"][data-name="${name}"][data-scope="${scope}"]`)
