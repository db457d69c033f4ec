/**
 * The dashboard page served at GET /ui: dashboard.html with the script of dashboard.ts bundled into
 * it, made once and kept in memory. A bundle of the program has it as a constant (esbuild's
 * `define`, scripts/bundle-options.mjs); the library reads the page scripts/build.mjs wrote beside
 * this module; running from the sources (tsx, vitest), the page is made from them on first use.
 */
import { readFileSync } from "node:fs"

/** The finished page, in a bundle of the program (replaced by esbuild; not defined elsewhere). */
declare const MCP_STORE_DASHBOARD_PAGE: string | undefined

/** Where dashboard.html takes its script (the same as scripts/bundle-options.mjs's DASHBOARD_SLOT). */
const SLOT = "<!-- dashboard.ts -->"

let cached: Promise<string> | undefined

/** The page made from the sources, by the function every build uses (the repository's scripts/ folder). */
const fromSources = async (): Promise<string> => {
  const options: { readonly dashboardPage: () => string } = await import(new URL("../../scripts/bundle-options.mjs", import.meta.url).href)
  return options.dashboardPage()
}

const load = async (): Promise<string> => {
  if (typeof MCP_STORE_DASHBOARD_PAGE === "string") return MCP_STORE_DASHBOARD_PAGE
  const html = readFileSync(new URL("./dashboard.html", import.meta.url), "utf8")
  return html.includes(SLOT) ? fromSources() : html
}

/** The dashboard's HTML text. */
export const dashboardHtml = (): Promise<string> => {
  cached ??= load()
  cached.catch(() => (cached = undefined))
  return cached
}
