// Builds dist/mcp-store.mjs: the program bundled into one ES module with esbuild, so `npm start`
// loads only the code it uses (a fraction of the Effect barrels tsx would load) and starts in well
// under the time and memory of running the TypeScript sources. Tests and development run the
// sources directly (tsx); this is the production start path.
import { build } from "esbuild"
import { copyFileSync, mkdirSync } from "node:fs"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))
mkdirSync(`${root}dist`, { recursive: true })
await build({
  entryPoints: [`${root}src/cli-entry.ts`],
  outfile: `${root}dist/mcp-store.mjs`,
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  sourcemap: "linked",
  logLevel: "warning",
  // CommonJS dependencies inside the bundle still call require().
  banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
  // Optional native add-ons of dependencies that the store never loads.
  external: ["@parcel/watcher", "msgpackr-extract"]
})
// The dashboard page is read at run time beside the module that serves it.
copyFileSync(`${root}src/ui/dashboard.html`, `${root}dist/dashboard.html`)
