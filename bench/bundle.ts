/**
 * Start-up experiment (not the product): the same sources bundled into one ES module by esbuild
 * (a dependency of tsx), so the store starts without tsx's loader and without loading hundreds of
 * separate modules. Used only to size the start-up proposal in RESULTS.md.
 */
import { copyFileSync, mkdirSync } from "node:fs"
import { join } from "node:path"
import { ROOT } from "./procs.js"

/** Bundles src/main.ts into `<dir>/bundle/x/main.mjs` (package.json one level up, as src/version.ts expects); resolves with its path and the build time. */
export const bundleStore = async (dir: string): Promise<{ script: string; buildMs: number }> => {
  const { build } = (await import("esbuild")) as typeof import("esbuild")
  const out = join(dir, "bundle", "x")
  mkdirSync(out, { recursive: true })
  copyFileSync(join(ROOT, "package.json"), join(dir, "bundle", "package.json"))
  copyFileSync(join(ROOT, "src", "ui", "dashboard.html"), join(out, "dashboard.html"))
  const started = performance.now()
  await build({
    stdin: {
      contents: `import { main } from "./src/main.ts"\nprocess.exitCode = await main(process.argv.slice(2))\n`,
      resolveDir: ROOT,
      loader: "ts",
      sourcefile: "bundle-entry.ts"
    },
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    outfile: join(out, "main.mjs"),
    logLevel: "error",
    banner: { js: "import { createRequire as __benchCreateRequire } from 'node:module'; const require = __benchCreateRequire(import.meta.url);" }
  })
  return { script: join(out, "main.mjs"), buildMs: performance.now() - started }
}
