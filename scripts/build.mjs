// Builds dist/, what the package ships and `npm start` runs (`npm run build`; `prepare` runs it, so
// `npm ci` leaves a built checkout and `npm pack` packs a fresh build):
//   dist/mcp-store.mjs    the `mcp-store` program bundled with esbuild (the entry, and the program in
//                         dist/mcp-store-<hash>.mjs chunks beside it): it loads only the code it uses
//                         and needs nothing from node_modules at run time
//   dist/demo-server.mjs  the demo MCP server of mcp.example.json (examples/demo-server.ts), bundled
//                         the same way (`mcp-store/demo-server`)
//   dist/index.js + .d.ts the library (`import("mcp-store")`): one module per source file of src/,
//                         dependencies imported; the JavaScript by esbuild (a file at a time, as tsc
//                         would emit it, comments aside), the declarations by tsc (tsconfig.build.json),
//                         and the JSON files the modules import, copied
//   dist/dashboard.html, dist/ui/dashboard.html  the dashboard page (src/ui/dashboard.html with the
//                         script of src/ui/dashboard.ts bundled in): the library reads it beside its
//                         src/ui/page.js; the program carries the same page in its bundle
// The build goes to a temporary folder that then replaces dist/ whole, so a half-built dist/ is never
// seen by a store running from it. Tests and development run the sources (scripts/dev.mjs, tsx).
import { build } from "esbuild"
import { spawn } from "node:child_process"
import { chmodSync, copyFileSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { bundleOptions, dashboardPage } from "./bundle-options.mjs"

const root = fileURLToPath(new URL("..", import.meta.url))
const out = `${root}.dist-${process.pid}`
const old = `${root}.dist-old-${process.pid}`
const require = createRequire(import.meta.url)

rmSync(out, { recursive: true, force: true })
mkdirSync(`${out}/ui`, { recursive: true })
try {
  const common = bundleOptions
  // The library's declarations by tsc, while esbuild bundles and compiles the library's JavaScript:
  // tsc keeps one core busy for most of the build, esbuild the other. tsc's JavaScript would cost it
  // a fifth more; esbuild's is the same code (a constructor may come before the class's fields).
  const declarations = new Promise((resolve, reject) => {
    const tsc = spawn(process.execPath, [require.resolve("typescript/bin/tsc"), "-p", `${root}tsconfig.build.json`, "--outDir", out], { cwd: root, stdio: "inherit" })
    tsc.on("error", reject)
    tsc.on("close", (code, signal) => (code === 0 ? resolve() : reject(new Error(`tsc -p tsconfig.build.json ended with ${signal ?? `exit code ${code}`}`))))
  })
  // Every part ends (a failed one fails the build) before the folder is used or removed.
  const parts = await Promise.allSettled([
    declarations,
    // The sources tsconfig.build.json takes: src/ but the dashboard's script (tsconfig.json's exclude).
    build({
      entryPoints: readdirSync(`${root}src`, { recursive: true })
        .filter((file) => file.endsWith(".ts") && !file.endsWith(".d.ts") && file !== "ui/dashboard.ts")
        .map((file) => `${root}src/${file}`),
      outdir: out,
      outbase: `${root}src`,
      format: "esm",
      platform: "node",
      // tsconfig.json's target; the JSON modules' `with { type: "json" }` is kept, as tsc keeps it.
      target: "es2022",
      supported: { "import-attributes": true },
      tsconfig: `${root}tsconfig.build.json`,
      charset: "utf8",
      logLevel: "warning"
    }),
    // Split at the entry's dynamic imports, so `--version` reads a few kilobytes, not the program.
    // The chunks stay beside the entry: src/version.ts reads ../package.json from its own module.
    build({
      ...common,
      entryPoints: { "mcp-store": `${root}src/cli-entry.ts` },
      outdir: out,
      splitting: true,
      outExtension: { ".js": ".mjs" },
      chunkNames: "mcp-store-[hash]"
    }),
    build({ ...common, entryPoints: [`${root}examples/demo-server.ts`], outfile: `${out}/demo-server.mjs` })
  ])
  for (const part of parts) if (part.status === "rejected") throw part.reason
  // Each module of the library has its declarations and its JavaScript, whatever the two lists of
  // sources say; the JSON modules they import are copied beside them.
  const emitted = readdirSync(out, { recursive: true })
  const modules = (suffix) => emitted.filter((file) => file.endsWith(suffix)).map((file) => file.slice(0, -suffix.length)).sort().join("\n")
  if (modules(".d.ts") !== modules(".js")) throw new Error("tsc's declarations and esbuild's modules are not of the same sources (tsconfig.build.json and scripts/build.mjs)")
  for (const file of emitted.filter((file) => file.endsWith(".js"))) {
    for (const [, json] of readFileSync(join(out, file), "utf8").matchAll(/from "(\.{1,2}\/[^"]*\.json)"/g)) {
      copyFileSync(join(root, "src", dirname(file), json), join(out, dirname(file), json))
    }
  }
  // esbuild writes 0644: the program (package.json `bin`) keeps its run bit, so `npx mcp-store` and
  // `./dist/mcp-store.mjs` in a clone run it (npm sets the bit only on install).
  chmodSync(`${out}/mcp-store.mjs`, 0o755)
  const page = dashboardPage()
  writeFileSync(`${out}/dashboard.html`, page)
  writeFileSync(`${out}/ui/dashboard.html`, page)
  rmSync(old, { recursive: true, force: true })
  try {
    renameSync(`${root}dist`, old)
  } catch (e) {
    if (e.code !== "ENOENT") throw e
  }
  renameSync(out, `${root}dist`)
  rmSync(old, { recursive: true, force: true })
} catch (e) {
  rmSync(out, { recursive: true, force: true })
  throw e
}
