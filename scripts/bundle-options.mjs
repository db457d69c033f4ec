// The esbuild options of the program's bundle, in one place: scripts/build.mjs builds dist/ with
// them, and bench/ab.ts builds the bundles it compares with them, so a benchmark measures what
// `npm start` runs.
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
  external: ["@parcel/watcher", "msgpackr-extract"]
}
