// Types of scripts/bundle-options.mjs for the TypeScript that imports it (bench/ab.ts).
import type { BuildOptions } from "esbuild"
export declare const bundleOptions: BuildOptions
