// ExtraNetworks: A1111's extra-network prompt tags, "<lora:name:0.8>", "<lora:name:1:0.5>",
// "<lora:name:te=0:unet=1>", "<lyco:...>", "<hypernet:...>": found and removed from the prompt text as
// A1111 does before any emphasis parsing (modules/extra_networks.py re_extra_net = <(\w+):([^>]+)>,
// parse_prompt, ExtraNetworkParams), then the lora / lyco tags read as A1111's Lora extension reads them
// (extensions-builtin/Lora/extra_networks_lora.py ExtraNetworkLora.activate), and the "Lora hashes"
// infotext value it writes. Qt-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera {

// One tag: <kind:items...>.
struct ExtraNetworkTag {
    std::string kind;                // "lora", "lyco", "hypernet", ...: \w+ (Unicode letters, digits, '_')
    std::vector<std::string> items;  // the text after the first ':', split on ':'
    // Items with exactly one '=' (and a second one) are named ("te=0.5"; a later name replaces an
    // earlier one), the others positional, in order (ExtraNetworkParams.__init__: item.split('=', 2)).
    std::vector<std::string> positional;
    std::vector<std::pair<std::string, std::string>> named;
    const std::string* namedValue(std::string_view name) const;
};

struct ExtraNetworkPrompt {
    std::string prompt;                 // the prompt with every tag replaced by "" (commas and spaces stay)
    std::vector<ExtraNetworkTag> tags;  // in the order they appear
};

// A1111's parse_prompt: every <(\w+):([^>]+)> (the first '>' closes a tag; no nesting, no escapes;
// a tag may span lines) is removed and returned. Ill-formed UTF-8 is kept as it is.
ExtraNetworkPrompt parseExtraNetworks(std::string_view prompt);

// A <lora:...> or <lyco:...> tag as A1111's ExtraNetworkLora.activate reads it: positional[0] is the
// name; te multiplier = positional[1] else 1, then te=; unet multiplier = positional[2] else the te
// multiplier, then unet=; dyn = positional[3], then dyn= (an integer).
struct LoraTag {
    std::string name;
    double teMultiplier = 1.0;
    double unetMultiplier = 1.0;
    std::optional<std::int64_t> dyn;
};

// The lora / lyco tags of `tags` in the order A1111 activates them: all tags of the kind that appears
// first, then those of the other (lookup_extra_networks groups by kind in first-appearance order; lyco
// is lora's alias, extensions-builtin/Lora/scripts/lora_script.py register_extra_network_alias). Numbers are read as Python's float() / int() read them (surrounding
// spaces allowed). Throws ValidationError("prompt") naming the tag for a tag without a name or with a
// value that is not a finite number (where A1111 reports an error and activates no LoRA).
std::vector<LoraTag> loraTags(const std::vector<ExtraNetworkTag>& tags);

// A1111's "Lora hashes" infotext value: "name1: 0123456789ab, name2: ..." in order, each name (the text
// the tag used) with ':' and ',' removed; a repeated name keeps its first place and takes the later
// hash (a Python dict); entries with an empty name or hash are left out (extra_networks_lora.py:
// p.lora_hashes). Empty when none.
std::string loraHashesInfotext(const std::vector<std::pair<std::string, std::string>>& nameAndShortHash);

}  // namespace tessera
