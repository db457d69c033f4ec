import { build } from "esbuild"
import { bundleOptions } from "/work/main/scripts/bundle-options.mjs"
const variant = process.argv[2]
const extra = variant === "min" ? { minify: true, keepNames: true } : variant === "ws" ? { minifyWhitespace: true, minifySyntax: true } : {}
const r = await build({ ...bundleOptions, ...extra, entryPoints: { "mcp-store": "/work/main/src/cli-entry.ts" }, outdir: `/work/main/.dist-try-${variant}`, splitting: true, outExtension: { ".js": ".mjs" }, chunkNames: "mcp-store-[hash]", metafile: true })
if (variant === "plain") { const fs = await import("node:fs"); fs.writeFileSync("/tmp/meta.json", JSON.stringify(r.metafile)) }
