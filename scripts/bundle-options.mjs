// The esbuild options of the program's bundle, in one place: scripts/build.mjs builds dist/ with
// them, and bench/ab.ts and the tests build the bundles they run with them, so a benchmark or a test
// runs what `npm start` runs. The dashboard page (src/ui/dashboard.html with the script of
// src/ui/dashboard.ts bundled into its slot) is made here too, and given to every bundle as the
// constant MCP_STORE_DASHBOARD_PAGE (src/ui/page.ts); running from the sources, page.ts makes it
// with dashboardPage() on first use. A page is kept in the project's own cache folder
// (node_modules/.cache/mcp-store-dashboard, never a folder other users can write to: the page runs
// with the operator's key) under the hash of what it is made from, so the processes that import these
// options (every test file does) build it once, not each; making a new one removes the older ones.
import { buildSync, version } from "esbuild"
import { createHash } from "node:crypto"
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const UI = fileURLToPath(new URL("../src/ui/", import.meta.url))
const CACHE = fileURLToPath(new URL("../node_modules/.cache/mcp-store-dashboard/", import.meta.url))

/** Where the page's template takes its script. */
export const DASHBOARD_SLOT = "<!-- dashboard.ts -->"

/** The dashboard page: the template with src/ui/dashboard.ts bundled (for browsers) into its slot. */
export const dashboardPage = () => {
  const template = readFileSync(`${UI}dashboard.html`, "utf8")
  const source = readFileSync(`${UI}dashboard.ts`, "utf8")
  const hash = createHash("sha256").update(`${version}\0${readFileSync(fileURLToPath(import.meta.url))}\0${template}\0${source}`).digest("hex").slice(0, 16)
  const cached = join(CACHE, `${hash}.html`)
  try {
    return readFileSync(cached, "utf8")
  } catch {
    // not made yet
  }
  const script = buildSync({
    entryPoints: [`${UI}dashboard.ts`],
    bundle: true,
    write: false,
    platform: "browser",
    format: "iife",
    target: "es2022",
    charset: "utf8",
    legalComments: "none",
    logLevel: "error"
  }).outputFiles[0].text
  if (!template.includes(DASHBOARD_SLOT)) throw new Error(`src/ui/dashboard.html has no ${DASHBOARD_SLOT}`)
  // A function, so that `$&` and the like in the script are not replacement patterns.
  const page = template.replace(DASHBOARD_SLOT, () => `<script>\n${script}</script>`)
  // Written aside and renamed, so that a process never reads half a page.
  mkdirSync(CACHE, { recursive: true, mode: 0o700 })
  const aside = `${cached}.${process.pid}`
  writeFileSync(aside, page)
  renameSync(aside, cached)
  for (const name of readdirSync(CACHE)) if (name.endsWith(".html") && join(CACHE, name) !== cached) rmSync(join(CACHE, name), { force: true })
  return page
}

export const bundleOptions = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  sourcemap: "linked",
  logLevel: "warning",
  // CommonJS dependencies inside the bundle still call require().
  banner: {
    js: "#!/usr/bin/env node\nimport { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);"
  },
  // jsonc-parser's `main` is a UMD build whose require() calls esbuild cannot follow: its ES build.
  alias: { "jsonc-parser": "jsonc-parser/lib/esm/main.js" },
  // Optional native add-ons of dependencies that the store never loads.
  external: ["@parcel/watcher", "msgpackr-extract"],
  define: { MCP_STORE_DASHBOARD_PAGE: JSON.stringify(dashboardPage()) }
}
