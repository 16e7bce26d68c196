// What the loader threads do with a decoded image, on the CPU: choose the region a sample
// takes (training: a random share of the area and aspect, as torchvision's
// RandomResizedCrop; evaluation: the centre, as Resize(size / 0.875) + CenterCrop(size)),
// and resize it to the model's square, channels first. Torch-free.
#pragma once

#include <cstdint>

#include "formats/image_decode.h"

namespace stoke::worker {

// A crop of between `min_area` and all of the image's area, of aspect between 3/4 and 4/3,
// at a random place; drawn from `seed` alone, so a sample's crop is the same whenever its
// (seed, epoch, index) is.
data::ImageRegion RandomResizedCrop(int width, int height, double min_area, uint64_t seed);

// The centred square of 0.875 of the shorter side.
data::ImageRegion CentreCrop(int width, int height);

// Bilinear resize of `image` ([H, W, C]) into `out`, [C, side, side].
void ResizeToChw(const data::DecodedImage& image, int side, uint8_t* out);

// A 64-bit mix of the values (splitmix64 steps): seeds per sample and per draw.
uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c = 0);

}  // namespace stoke::worker
